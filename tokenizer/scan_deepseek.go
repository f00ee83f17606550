package tokenizer

import (
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"
)

// The three DeepSeek-V3 pre-tokenizer patterns, matched without a regex
// engine by digits, kana and deepseekWords. Unlike the others, these leave
// gaps: characters no match covers.
const (
	digitsPattern   = `\p{N}{1,3}`
	kanaPattern     = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekPattern = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

const (
	pM = unicode16.PropM
	pP = unicode16.PropP
	pS = unicode16.PropS
)

// gapMatches emits the matches next finds, moving one character on where
// none starts, as a regex search does.
func gapMatches(s string, sink matchSink, next func(string, int) (int, bool)) {
	for i := 0; i < len(s); {
		if e, ok := next(s, i); ok {
			sink.match(i, e)
			i = e
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
}

type digits struct{}

func (digits) matches(s string, sink matchSink) {
	gapMatches(s, sink, func(s string, i int) (int, bool) {
		e := i
		for k := 0; k < 3 && e < len(s); k++ {
			_, n, p := at(s, e)
			if p&pN == 0 {
				break
			}
			e += n
		}
		return e, e > i
	})
}

type kana struct{}

func isKana(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x30ff
}

func (kana) matches(s string, sink matchSink) {
	gapMatches(s, sink, func(s string, i int) (int, bool) {
		e := i
		for e < len(s) {
			r, n := utf8.DecodeRuneInString(s[e:])
			if !isKana(r) {
				break
			}
			e += n
		}
		return e, e > i
	})
}

type deepseekWords struct{}

func (deepseekWords) matches(s string, sink matchSink) {
	gapMatches(s, sink, deepseekNext)
}

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

func isASCIILetter(c byte) bool {
	return c|0x20 >= 'a' && c|0x20 <= 'z'
}

func deepseekNext(s string, i int) (int, bool) {
	r, n, p := at(s, i)
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		e := i + 1
		for e < len(s) && isASCIILetter(s[e]) {
			e++
		}
		return e, true
	}
	if r != '\r' && r != '\n' && p&(pL|pP|pS) == 0 && i+n < len(s) {
		if _, _, p2 := at(s, i+n); p2&(pL|pM) != 0 {
			return spanAny(s, i+n, pL|pM), true
		}
	}
	if p&(pL|pM) != 0 {
		return spanAny(s, i, pL|pM), true
	}
	if r == ' ' && i+1 < len(s) {
		if _, _, p2 := at(s, i+1); p2&(pP|pS) != 0 {
			return newlines(s, spanAny(s, i+1, pP|pS)), true
		}
	}
	if p&(pP|pS) != 0 {
		return newlines(s, spanAny(s, i, pP|pS)), true
	}
	if p&pSpace != 0 {
		return whitespace(s, i), true
	}
	return 0, false
}
