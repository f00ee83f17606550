package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"
)

// addedSet matches a set of added tokens leftmost-longest with a byte trie,
// with their single_word, lstrip and rstrip options.
type addedSet struct {
	// children maps node<<8 | byte to the child node.
	children map[uint32]uint32
	// token is the index in tokens of the token ending at each node, -1
	// where none does.
	token  []int32
	tokens []addedToken
	first  [256]bool // bytes some token starts with
	firsts int       // how many bytes some token starts with
	only   byte      // the byte every token starts with, when firsts == 1
}

type addedToken struct {
	id                         uint32
	singleWord, lstrip, rstrip bool
}

func newAddedSet() *addedSet {
	return &addedSet{children: map[uint32]uint32{}, token: []int32{-1}}
}

func (a *addedSet) add(content string, tok addedToken) {
	if content == "" {
		return
	}
	if !a.first[content[0]] {
		a.first[content[0]] = true
		a.firsts++
		a.only = content[0]
	}
	node := uint32(0)
	for i := 0; i < len(content); i++ {
		key := node<<8 | uint32(content[i])
		child, ok := a.children[key]
		if !ok {
			child = uint32(len(a.token))
			a.token = append(a.token, -1)
			a.children[key] = child
		}
		node = child
	}
	if a.token[node] < 0 {
		a.token[node] = int32(len(a.tokens))
		a.tokens = append(a.tokens, tok)
	} else {
		a.tokens[a.token[node]] = tok // a later entry wins
	}
}

func (a *addedSet) empty() bool { return len(a.tokens) == 0 }

// longest returns the length and index of the longest token starting at
// s[i], or 0, and its reach: one past the last byte it read, len(s)+1 when
// it ran into the end of s (what follows could then change its answer).
func (a *addedSet) longest(s string, i int) (n int, tok int32, reach int) {
	node := uint32(0)
	for j := i; j < len(s); j++ {
		child, ok := a.children[node<<8|uint32(s[j])]
		if !ok {
			return n, tok, j + 1
		}
		node = child
		if t := a.token[node]; t >= 0 {
			n, tok = j+1-i, t
		}
	}
	return n, tok, len(s) + 1
}

// next finds the leftmost-longest match at or after i, and the reach of
// the search (see longest).
func (a *addedSet) next(s string, i int) (start, end int, tok int32, reach int, ok bool) {
	for ; i < len(s); i++ {
		if a.firsts == 1 {
			k := strings.IndexByte(s[i:], a.only)
			if k < 0 {
				break
			}
			i += k
		} else if !a.first[s[i]] {
			continue
		}
		n, t, r := a.longest(s, i)
		reach = max(reach, r)
		if n > 0 {
			return i, i + n, t, reach, true
		}
	}
	return 0, 0, 0, len(s) + 1, false
}

// split calls text for every stretch of s between tokens (with its offset)
// and token for every token, in order; empty stretches are skipped. Matches
// are found left to right, each search resuming after the previous match;
// a single_word token not standing alone is skipped, lstrip and rstrip
// tokens take the whitespace beside them.
func (a *addedSet) split(s string, text func(string, int) error, token func(uint32)) error {
	return a.splitFrom(s, scanState{}, text, token, nil)
}

// scanState is where a split stands after a token: the next search starts
// at i (the token's end), the text before done (i plus the whitespace an
// rstrip token took) is consumed, and reach is the split's reach so far.
type scanState struct{ i, done, reach int }

// splitFrom is split resumed at st, as if s[:st.done] had been split and
// its last token had left st. When mark is not nil it is called after every
// token taken with the state after it, whose reach is the split's so far
// (st.reach at the start): one past the last byte of s any of its decisions read (the trie walks of
// the searches, single_word's look at the rune after a token, rstrip's
// look past the whitespace it took), len(s)+1 when one ran into the end of
// s. Up to that token, the split of any text agreeing with s below the
// reach is the same: the same stretches, the same tokens, the same state.
// Nothing before the token looks further: lstrip and single_word look back,
// and lstrip stops at the previous token.
func (a *addedSet) splitFrom(s string, st scanState, text func(string, int) error, token func(uint32), mark func(st scanState)) error {
	done := st.done // end of the last token taken
	reach := st.reach
	for i := st.i; !a.empty(); {
		start, end, t, r, ok := a.next(s, i)
		if !ok {
			break
		}
		reach = max(reach, r)
		i = end
		tok := a.tokens[t]
		if tok.singleWord {
			reach = max(reach, runeReach(s, end))
			if start > 0 && endsWithWord(s[:start]) || end < len(s) && startsWithWord(s[end:]) {
				continue
			}
		}
		if tok.lstrip {
			start = max(trimSpaceLeft(s, start), done)
		}
		if tok.rstrip {
			end = trimSpaceRight(s, end)
			reach = max(reach, runeReach(s, end))
		}
		if done < start {
			if err := text(s[done:start], done); err != nil {
				return err
			}
		}
		token(tok.id)
		done = end
		if mark != nil {
			mark(scanState{i: i, done: done, reach: reach})
		}
	}
	if done < len(s) {
		return text(s[done:], done)
	}
	return nil
}

// runeReach is the reach of reading the rune at s[i]: one past it, or
// len(s)+1 at the end of s.
func runeReach(s string, i int) int {
	if i >= len(s) {
		return len(s) + 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return i + n
}

func isSpace(r rune) bool { return unicode16.Props(r)&unicode16.PropSpace != 0 }

// isWordChar is \w of the Rust regex crate: Alphabetic, marks, decimal
// digits, connector punctuation and the joiners.
func isWordChar(r rune) bool {
	if unicode16.Props(r)&(unicode16.PropAlpha|unicode16.PropM) != 0 {
		return true
	}
	return r == 0x200c || r == 0x200d || unicode.Is(unicode16.Nd, r) || unicode.Is(unicode16.Pc, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordChar(r)
}

// trimSpaceLeft moves i back over the whitespace before it.
func trimSpaceLeft(s string, i int) int {
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !isSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// trimSpaceRight moves i forward over the whitespace after it.
func trimSpaceRight(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isSpace(r) {
			break
		}
		i += n
	}
	return i
}
