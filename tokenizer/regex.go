package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"

	"github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"
)

// regex is a generic pattern run by regexp2, a backtracking engine with the
// same leftmost-first semantics and lookaround as the Oniguruma engine the
// Rust tokenizers use; its Unicode classes are rewritten to Unicode 16.
type regex struct{ re *regexp2.Regexp }

// newMatcher returns the fastest exact matcher for a pre-tokenizer pattern.
func newMatcher(pattern string) (matcher, error) {
	switch pattern {
	case llama3Pattern:
		return scanner{maxDigits: 3}, nil
	case qwenPattern:
		return scanner{maxDigits: 1}, nil
	case o200kPattern:
		return o200k{contractions: true, maxDigits: 3}, nil
	case tekkenPattern:
		return o200k{maxDigits: 1}, nil
	case digitsPattern:
		return digits{}, nil
	case kanaPattern:
		return kana{}, nil
	case deepseekPattern:
		return deepseekWords{}, nil
	}
	rewritten, err := rewritePattern(pattern)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: pattern %q: %w", pattern, err)
	}
	re, err := newRegex(rewritten)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: pattern %q: %w", pattern, shorten(err))
	}
	return re, nil
}

// newRegex compiles a rewritten pattern.
func newRegex(rewritten string) (regex, error) {
	re, err := regexp2.Compile(rewritten, regexp2.None)
	return regex{re}, err
}

func (x regex) matches(s string, sink matchSink) {
	runes := []rune(s)
	m, err := x.re.FindRunesMatch(runes)
	ri, bi := 0, 0 // a rune index and its byte offset
	byteAt := func(r int) int {
		for ; ri < r; ri++ {
			bi += utf8.RuneLen(runes[ri])
		}
		return bi
	}
	for err == nil && m != nil {
		start := byteAt(m.Index)
		end := byteAt(m.Index + m.Length)
		sink.match(start, end)
		m, err = x.re.FindNextMatch(m)
	}
}

// rewritePattern replaces \p{..}, \P{..}, \s and \S by explicit Unicode 16
// character sets and refuses constructs whose meaning could differ between
// Oniguruma and regexp2.
func rewritePattern(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			if strings.HasPrefix(p[i+1:], "^") {
				b.WriteByte('^')
				i++
			}
			if strings.HasPrefix(p[i+1:], "]") {
				b.WriteString(`\]`)
				i++
			}
		case c == '[' && inClass:
			return "", fmt.Errorf("nested character class at %d not supported", i)
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		case c == '(' && strings.HasPrefix(p[i:], "(?i"):
			return rewriteFold(p, i, &b)
		case (c == '^' || c == '$') && !inClass:
			// Line anchors in Oniguruma, string anchors in regexp2.
			return "", fmt.Errorf("anchor %c at %d not supported", c, i)
		case c == '\\':
			n, err := rewriteEscape(p, i, inClass, &b)
			if err != nil {
				return "", err
			}
			i += n
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// rewriteEscape writes the rewrite of the escape at p[i] and returns how
// many bytes after the backslash it used.
func rewriteEscape(p string, i int, inClass bool, b *strings.Builder) (int, error) {
	if i+1 >= len(p) {
		return 0, fmt.Errorf("trailing backslash")
	}
	c := p[i+1]
	var name string
	used := 1
	switch c {
	case 's', 'S':
		name = "White_Space"
	case 'p', 'P':
		if i+2 < len(p) && p[i+2] == '{' {
			end := strings.IndexByte(p[i+2:], '}')
			if end < 0 {
				return 0, fmt.Errorf("unterminated \\%c{ at %d", c, i)
			}
			name, used = p[i+3:i+2+end], 2+end
		} else if i+2 < len(p) {
			name, used = p[i+2:i+3], 2
		}
	case 'd', 'D', 'w', 'W', 'b', 'B', 'h', 'H', 'x', 'u', 'X', 'R', 'K', 'G', 'A', 'z', 'Z', 'k', 'g':
		return 0, fmt.Errorf(`\%c at %d not supported`, c, i)
	default:
		b.WriteByte('\\')
		b.WriteByte(c)
		return 1, nil
	}
	t := unicode16.Tables[name]
	if t == nil {
		return 0, fmt.Errorf("unknown property %q at %d", name, i)
	}
	negate := c == 'S' || c == 'P'
	if negate && inClass {
		return 0, fmt.Errorf(`negated property \%c inside a class at %d not supported`, c, i)
	}
	if !inClass {
		b.WriteByte('[')
		if negate {
			b.WriteByte('^')
		}
	}
	writeRanges(b, t)
	if !inClass {
		b.WriteByte(']')
	}
	return used, nil
}

func writeRanges(b *strings.Builder, t *unicode.RangeTable) {
	for _, r := range t.R16 {
		writeRange(b, rune(r.Lo), rune(r.Hi))
	}
	for _, r := range t.R32 {
		writeRange(b, rune(r.Lo), rune(r.Hi))
	}
}

func writeRange(b *strings.Builder, lo, hi rune) {
	writeClassRune(b, lo)
	if hi > lo {
		b.WriteByte('-')
		writeClassRune(b, hi)
	}
}

// writeClassRune writes r as a character class member: escaped when ASCII
// punctuation or a control, literal otherwise.
func writeClassRune(b *strings.Builder, r rune) {
	switch {
	case r < 0x20 || r == 0x7f:
		fmt.Fprintf(b, `\x%02x`, r)
	case r == '\\' || r == ']' || r == '[' || r == '^' || r == '-':
		b.WriteByte('\\')
		b.WriteRune(r)
	default:
		b.WriteRune(r)
	}
}

// rewriteFold handles the one case-insensitive construct tokenizer patterns
// use: (?i:...) over ASCII letters, apostrophes and alternation, spelled out
// as explicit classes. It rewrites the rest of the pattern recursively.
func rewriteFold(p string, i int, b *strings.Builder) (string, error) {
	if !strings.HasPrefix(p[i:], "(?i:") {
		return "", fmt.Errorf("(?i at %d: only (?i:...) groups are supported", i)
	}
	end := strings.IndexByte(p[i:], ')')
	if end < 0 {
		return "", fmt.Errorf("unterminated (?i: at %d", i)
	}
	b.WriteString("(?:")
	for _, c := range []byte(p[i+4 : i+end]) {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			lo := c | 0x20
			fmt.Fprintf(b, "[%c%c]", lo, lo-0x20)
		case c == '\'' || c == '|':
			b.WriteByte(c)
		default:
			return "", fmt.Errorf("(?i:...) at %d holds %q: not supported", i, c)
		}
	}
	b.WriteByte(')')
	rest, err := rewritePattern(p[i+end+1:])
	if err != nil {
		return "", err
	}
	return b.String() + rest, nil
}

// shorten cuts the rewritten pattern regexp2 quotes out of its errors.
func shorten(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, " in `"); i >= 0 {
		msg = msg[:i]
	}
	return errors.New(msg)
}
