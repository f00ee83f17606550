package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// splitter is one pre-tokenization step: it cuts s into pieces, in order,
// never empty.
type splitter interface {
	split(s string, emit func(piece string))
}

// matcher finds the non-overlapping matches of a pattern, left to right.
type matcher interface {
	matches(s string, emit func(start, end int))
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

// splitStep is the Split pre-tokenizer.
type splitStep struct {
	m        matcher
	behavior behavior
}

// split cuts s at the matches of the pattern. Pieces are emitted as soon as
// they can no longer grow.
func (p splitStep) split(s string, emit func(string)) {
	start := 0       // start of the piece being built
	pendingEnd := -1 // end of a piece held back for merging; -1: none
	pendingMatch := false
	flush := func() {
		if pendingEnd > start {
			emit(s[start:pendingEnd])
		}
		if pendingEnd >= 0 {
			start = pendingEnd
		}
		pendingEnd = -1
	}
	add := func(a, b int, isMatch bool) {
		switch {
		case p.behavior == removed && isMatch:
			flush()
			start = b
			return
		case p.behavior == mergedWithPrevious && isMatch && pendingEnd >= 0 && !pendingMatch,
			p.behavior == mergedWithNext && !isMatch && pendingEnd >= 0 && pendingMatch,
			p.behavior == contiguous && pendingEnd >= 0 && isMatch == pendingMatch:
			pendingEnd = b
		default:
			flush()
			start = a
			pendingEnd = b
		}
		pendingMatch = isMatch
		if p.behavior == isolated || p.behavior == removed {
			flush()
		}
	}
	prev := 0
	p.m.matches(s, func(a, b int) {
		if a > prev {
			add(prev, a, false)
		}
		if b > a {
			add(a, b, true)
		}
		prev = b
	})
	if prev < len(s) {
		add(prev, len(s), false)
	}
	flush()
}

// literal matches a fixed string.
type literal string

func (l literal) matches(s string, emit func(int, int)) {
	for off := 0; off < len(s); {
		i := strings.Index(s[off:], string(l))
		if i < 0 {
			return
		}
		emit(off+i, off+i+len(l))
		off += i + len(l)
	}
}

// prefixSpace is ByteLevel's add_prefix_space: a space before every piece
// that does not start with one.
type prefixSpace struct{}

func (prefixSpace) split(s string, emit func(string)) {
	if strings.HasPrefix(s, " ") {
		emit(s)
		return
	}
	emit(" " + s)
}

// gpt2Pattern is the pattern ByteLevel splits with when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// newPreTokenizer returns the steps of a pre-tokenizer and whether it ends
// with the ByteLevel byte-to-character mapping.
func newPreTokenizer(raw json.RawMessage) (steps []splitter, byteLevel bool, err error) {
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
		return []splitter{s}, false, nil
	case "ByteLevel":
		if c.AddPrefixSpace {
			steps = append(steps, prefixSpace{})
		}
		if c.UseRegex == nil || *c.UseRegex {
			m, err := newMatcher(gpt2Pattern)
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, splitStep{m: m, behavior: isolated})
		}
		return steps, true, nil
	default:
		return nil, false, fmt.Errorf("tokenizer: pre_tokenizer %q not supported", c.Type)
	}
}

func newSplit(c *componentJSON) (splitter, error) {
	b, ok := behaviors[c.Behavior]
	if !ok {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer Split: behavior %q not supported", c.Behavior)
	}
	if c.Invert {
		return nil, errors.New("tokenizer: pre_tokenizer Split: invert not supported")
	}
	switch {
	case c.Pattern == nil:
		return nil, errors.New("tokenizer: pre_tokenizer Split: no pattern")
	case c.Pattern.String != nil:
		if *c.Pattern.String == "" {
			return nil, errors.New("tokenizer: pre_tokenizer Split: empty pattern")
		}
		return splitStep{m: literal(*c.Pattern.String), behavior: b}, nil
	case c.Pattern.Regex != nil:
		m, err := newMatcher(*c.Pattern.Regex)
		if err != nil {
			return nil, err
		}
		return splitStep{m: m, behavior: b}, nil
	default:
		return nil, errors.New("tokenizer: pre_tokenizer Split: empty pattern")
	}
}
