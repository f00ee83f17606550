package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// step is one pre-tokenization step: a Split over a pattern, ByteLevel's
// add_prefix_space, or Metaspace's replacement (then m, if set, splits).
type step struct {
	m           matcher // nil: no split
	behavior    behavior
	prefixSpace bool // ByteLevel: a space before every piece not starting with one
	meta        *metaspace
}

// matcher finds the non-overlapping matches of a pattern, left to right.
type matcher interface {
	matches(s string, sink matchSink)
}

// matchSink receives matches.
type matchSink interface {
	match(start, end int)
}

// behavior is what a Split does with the matches of its pattern.
type behavior uint8

const (
	isolated behavior = iota
	removed
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{
	"Isolated":           isolated,
	"Removed":            removed,
	"MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext":     mergedWithNext,
	"Contiguous":         contiguous,
}

// pieceSink receives the pieces of a split and their offsets in it.
type pieceSink interface {
	piece(p string, start int)
}

// splitRun is the state of one Split over one string: it turns matches and
// the gaps between them into pieces by the behavior, emitting each as soon
// as it can no longer grow. Runs live in the encoder: no allocation.
type splitRun struct {
	s            string
	out          pieceSink
	behavior     behavior
	start        int  // start of the piece being built
	pendingEnd   int  // end of a piece held back for merging; -1: none
	pendingMatch bool // whether the held piece is a match
	prev         int  // end of the last match
}

// run splits s with step st, sending pieces to out.
func (r *splitRun) run(st *step, s string, out pieceSink) {
	*r = splitRun{s: s, out: out, behavior: st.behavior, pendingEnd: -1}
	st.m.matches(s, r)
	if r.prev < len(s) {
		r.add(r.prev, len(s), false)
	}
	r.flush()
}

func (r *splitRun) match(a, b int) {
	if a > r.prev {
		r.add(r.prev, a, false)
	}
	if b > a {
		r.add(a, b, true)
	}
	r.prev = b
}

func (r *splitRun) flush() {
	if r.pendingEnd > r.start {
		r.out.piece(r.s[r.start:r.pendingEnd], r.start)
	}
	if r.pendingEnd >= 0 {
		r.start = r.pendingEnd
	}
	r.pendingEnd = -1
}

func (r *splitRun) add(a, b int, isMatch bool) {
	switch {
	case r.behavior == removed && isMatch:
		r.flush()
		r.start = b
		return
	case r.behavior == mergedWithPrevious && isMatch && r.pendingEnd >= 0 && !r.pendingMatch,
		r.behavior == mergedWithNext && !isMatch && r.pendingEnd >= 0 && r.pendingMatch,
		r.behavior == contiguous && r.pendingEnd >= 0 && isMatch == r.pendingMatch:
		r.pendingEnd = b
	default:
		r.flush()
		r.start = a
		r.pendingEnd = b
	}
	r.pendingMatch = isMatch
	if r.behavior == isolated || r.behavior == removed {
		r.flush()
	}
}

// literal matches a fixed string.
type literal string

func (l literal) matches(s string, sink matchSink) {
	for off := 0; off < len(s); {
		i := strings.Index(s[off:], string(l))
		if i < 0 {
			return
		}
		sink.match(off+i, off+i+len(l))
		off += i + len(l)
	}
}

// gpt2Pattern is the pattern ByteLevel splits with when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// newPreTokenizer returns the steps of a pre-tokenizer and whether it ends
// with the ByteLevel byte-to-character mapping.
func newPreTokenizer(raw json.RawMessage) (steps []step, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for i, r := range c.PreTokenizers {
			s, bl, err := newPreTokenizer(r)
			if err != nil {
				return nil, false, err
			}
			if byteLevel && len(s) > 0 {
				return nil, false, fmt.Errorf("tokenizer: pre_tokenizer %d splits after ByteLevel: not supported", i)
			}
			steps, byteLevel = append(steps, s...), byteLevel || bl
		}
		return steps, byteLevel, nil
	case "Split":
		s, err := newSplit(&c)
		if err != nil {
			return nil, false, err
		}
		return []step{s}, false, nil
	case "Digits":
		return []step{newDigits(&c)}, false, nil
	case "Punctuation":
		st, err := newPunctuation(&c)
		if err != nil {
			return nil, false, err
		}
		return []step{st}, false, nil
	case "Metaspace":
		st, err := newMetaspace(&c)
		if err != nil {
			return nil, false, err
		}
		return []step{st}, false, nil
	case "ByteLevel":
		if c.AddPrefixSpace {
			steps = append(steps, step{prefixSpace: true})
		}
		if c.UseRegex == nil || *c.UseRegex {
			m, err := newMatcher(gpt2Pattern)
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, step{m: m, behavior: isolated})
		}
		return steps, true, nil
	default:
		return nil, false, fmt.Errorf("tokenizer: pre_tokenizer %q not supported", c.Type)
	}
}

func newSplit(c *componentJSON) (step, error) {
	b, ok := behaviors[c.Behavior]
	if !ok {
		return step{}, errBehavior(c.Behavior)
	}
	if c.Invert {
		return step{}, errors.New("tokenizer: pre_tokenizer Split: invert not supported")
	}
	switch {
	case c.Pattern == nil:
		return step{}, errors.New("tokenizer: pre_tokenizer Split: no pattern")
	case c.Pattern.String != nil:
		if *c.Pattern.String == "" {
			return step{}, errors.New("tokenizer: pre_tokenizer Split: empty pattern")
		}
		return step{m: literal(*c.Pattern.String), behavior: b}, nil
	case c.Pattern.Regex != nil:
		m, err := newMatcher(*c.Pattern.Regex)
		if err != nil {
			return step{}, err
		}
		return step{m: m, behavior: b}, nil
	default:
		return step{}, errors.New("tokenizer: pre_tokenizer Split: empty pattern")
	}
}

func errBehavior(b string) error {
	return fmt.Errorf("tokenizer: pre_tokenizer: split behavior %q not supported", b)
}
