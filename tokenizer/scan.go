package tokenizer

import (
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"
)

// The Llama-3 and Qwen2/3 pre-tokenizer patterns, differing only in how many
// digits make a piece. scanner matches them without a regex engine.
const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

const (
	pL     = unicode16.PropL
	pN     = unicode16.PropN
	pSpace = unicode16.PropSpace
)

// asciiProps caches the properties of ASCII characters.
var asciiProps = func() (t [128]unicode16.Prop) {
	for i := range t {
		t[i] = unicode16.Props(rune(i))
	}
	return t
}()

// at decodes the character at s[i] and its properties.
func at(s string, i int) (r rune, size int, p unicode16.Prop) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiProps[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, unicode16.Props(r)
}

// scanner is the Llama-3 / Qwen pattern; maxDigits is 3 or 1.
type scanner struct{ maxDigits int }

func (sc scanner) matches(s string, sink matchSink) {
	if w, ok := sink.(*wordSink); ok && w.prev == 0 {
		// Matches tile the text: every one is a word, with no gaps. The
		// encoder's own sink is called directly, not through matchSink,
		// so that each word costs no dynamic call (encoder.split builds
		// the sink with prev 0 just before).
		for i := 0; i < len(s); {
			e := sc.next(s, i)
			w.e.wordAt(s, i, e)
			i = e
		}
		w.prev = len(s)
		return
	}
	for i := 0; i < len(s); {
		e := sc.next(s, i)
		sink.match(i, e)
		i = e
	}
}

// next returns the end of the match starting at i; every position starts
// one, so matches tile the text.
func (sc scanner) next(s string, i int) int {
	// The common ASCII words first: letters, or a space and letters.
	if c := s[i]; c < utf8.RuneSelf {
		if asciiProps[c]&pL != 0 {
			return spanLetters(s, i+1)
		}
		if c == ' ' && i+1 < len(s) && s[i+1] < utf8.RuneSelf && asciiProps[s[i+1]]&pL != 0 {
			return spanLetters(s, i+2)
		}
	}
	r, n, p := at(s, i)
	if r == '\'' {
		if e := contraction(s, i+1); e > 0 {
			return e
		}
	}
	if p&pL != 0 {
		return spanLetters(s, i+n)
	}
	if r != '\r' && r != '\n' && p&pN == 0 && i+n < len(s) {
		if _, n2, p2 := at(s, i+n); p2&pL != 0 {
			return spanLetters(s, i+n+n2)
		}
	}
	if p&pN != 0 {
		e := i + n
		for k := 1; k < sc.maxDigits && e < len(s); k++ {
			_, n2, p2 := at(s, e)
			if p2&pN == 0 {
				break
			}
			e += n2
		}
		return e
	}
	if r == ' ' && i+1 < len(s) {
		if _, _, p2 := at(s, i+1); p2&(pSpace|pL|pN) == 0 {
			return newlines(s, spanOther(s, i+1))
		}
	}
	if p&(pSpace|pL|pN) == 0 {
		return newlines(s, spanOther(s, i))
	}
	return whitespace(s, i)
}

// contraction matches s|t|re|ve|m|ll|d, ignoring case, at s[i:] and returns
// its end, or 0.
func contraction(s string, i int) int {
	lower := func(k int) byte {
		if k < len(s) {
			return s[k] | 0x20
		}
		return 0
	}
	switch lower(i) {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if lower(i+1) == 'e' {
			return i + 2
		}
	case 'l':
		if lower(i+1) == 'l' {
			return i + 2
		}
	}
	return 0
}

// spanLetters returns the end of the run of letters (\p{L}) from i.
func spanLetters(s string, i int) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiProps[c]&pL == 0 {
				break
			}
			i++
			continue
		}
		_, n, q := at(s, i)
		if q&pL == 0 {
			break
		}
		i += n
	}
	return i
}

// spanOther returns the end of the run of [^\s\p{L}\p{N}] from i.
func spanOther(s string, i int) int {
	for i < len(s) {
		_, n, q := at(s, i)
		if q&(pSpace|pL|pN) != 0 {
			break
		}
		i += n
	}
	return i
}

// newlines returns the end of the run of [\r\n] from i.
func newlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// whitespace matches \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace character.
func whitespace(s string, i int) int {
	j, lastNL, lastStart := i, -1, i
	for j < len(s) {
		r, n, q := at(s, j)
		if q&pSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		lastStart = j
		j += n
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case j == len(s) || lastStart == i:
		return j
	default:
		return lastStart
	}
}
