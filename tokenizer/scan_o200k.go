package tokenizer

import "github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"

// o200kPattern is gpt-oss's pre-tokenizer pattern and tekkenPattern
// Mistral's (Nemo, Pixtral) same shape without contractions and with single
// digits; o200k matches both without a regex engine.
const (
	o200kPattern  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	tekkenPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

const (
	pUpper = unicode16.PropLu | unicode16.PropLt | unicode16.PropLm | unicode16.PropLo | unicode16.PropM
	pLower = unicode16.PropLl | unicode16.PropLm | unicode16.PropLo | unicode16.PropM
)

// o200k is the o200k pattern (contractions, up to 3 digits) or the tekken
// one (neither).
type o200k struct {
	contractions bool
	maxDigits    int
}

func (o o200k) matches(s string, sink matchSink) {
	for i := 0; i < len(s); {
		e := o.next(s, i)
		sink.match(i, e)
		i = e
	}
}

// next returns the end of the match at i, trying the alternatives in the
// pattern's order (with the optional prefix character first).
func (o o200k) next(s string, i int) int {
	r, n, p := at(s, i)
	prefix := r != '\r' && r != '\n' && p&(pL|pN) == 0 && i+n < len(s)
	for _, word := range [...]func(string, int) (int, bool){casedWord, capitalWord} {
		e, ok := 0, false
		if prefix {
			e, ok = word(s, i+n)
		}
		if !ok {
			e, ok = word(s, i)
		}
		if ok {
			if o.contractions {
				e = withContraction(s, e)
			}
			return e
		}
	}
	if p&pN != 0 {
		e := i + n
		for k := 1; k < o.maxDigits && e < len(s); k++ {
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
			return newlinesOrSlash(s, spanOther(s, i+1))
		}
	}
	if p&(pSpace|pL|pN) == 0 {
		return newlinesOrSlash(s, spanOther(s, i))
	}
	return whitespace(s, i)
}

// casedWord matches [upper]*[lower]+ at q, backtracking as the regex engine
// would.
func casedWord(s string, q int) (int, bool) {
	j, lastLower := q, -1
	for j < len(s) {
		_, n, p := at(s, j)
		if p&pUpper == 0 {
			break
		}
		if p&pLower != 0 {
			lastLower = j + n
		}
		j += n
	}
	end := -1
	if j < len(s) {
		if _, _, p := at(s, j); p&pLower != 0 {
			end = spanAny(s, j, pLower)
		}
	}
	if end < 0 {
		if lastLower < 0 {
			return 0, false
		}
		end = lastLower
	}
	return end, true
}

// capitalWord matches [upper]+[lower]* at q.
func capitalWord(s string, q int) (int, bool) {
	j := spanAny(s, q, pUpper)
	if j == q {
		return 0, false
	}
	return spanAny(s, j, pLower), true
}

// spanAny returns the end of the run of characters with any property in p.
func spanAny(s string, i int, p unicode16.Prop) int {
	for i < len(s) {
		_, n, q := at(s, i)
		if q&p == 0 {
			break
		}
		i += n
	}
	return i
}

func withContraction(s string, end int) int {
	if end < len(s) && s[end] == '\'' {
		if e := contraction(s, end+1); e > 0 {
			return e
		}
	}
	return end
}

// newlinesOrSlash returns the end of the run of [\r\n/] from i.
func newlinesOrSlash(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n' || s[i] == '/') {
		i++
	}
	return i
}
