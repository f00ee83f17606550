package tokenizer

import (
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
	a.first[content[0]] = true
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
// s[i], or 0.
func (a *addedSet) longest(s string, i int) (n int, tok int32) {
	node := uint32(0)
	for j := i; j < len(s); j++ {
		child, ok := a.children[node<<8|uint32(s[j])]
		if !ok {
			break
		}
		node = child
		if t := a.token[node]; t >= 0 {
			n, tok = j+1-i, t
		}
	}
	return n, tok
}

// next finds the leftmost-longest match at or after i.
func (a *addedSet) next(s string, i int) (start, end int, tok int32, ok bool) {
	for ; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		if n, t := a.longest(s, i); n > 0 {
			return i, i + n, t, true
		}
	}
	return 0, 0, 0, false
}

// split calls text for every stretch of s between tokens (with its offset)
// and token for every token, in order; empty stretches are skipped. Matches
// are found left to right, each search resuming after the previous match;
// a single_word token not standing alone is skipped, lstrip and rstrip
// tokens take the whitespace beside them.
func (a *addedSet) split(s string, text func(string, int) error, token func(uint32)) error {
	done := 0 // end of the last token taken
	for i := 0; !a.empty(); {
		start, end, t, ok := a.next(s, i)
		if !ok {
			break
		}
		i = end
		tok := a.tokens[t]
		if tok.singleWord && (start > 0 && endsWithWord(s[:start]) || end < len(s) && startsWithWord(s[end:])) {
			continue
		}
		if tok.lstrip {
			start = max(trimSpaceLeft(s, start), done)
		}
		if tok.rstrip {
			end = trimSpaceRight(s, end)
		}
		if done < start {
			if err := text(s[done:start], done); err != nil {
				return err
			}
		}
		token(tok.id)
		done = end
	}
	if done < len(s) {
		return text(s[done:], done)
	}
	return nil
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
