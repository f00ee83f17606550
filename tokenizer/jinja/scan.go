package jinja

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

func decodeRune(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

var (
	rawBegin = regexp.MustCompile(`^\s*raw\s*(-?)%}`)
	rawEnd   = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*([-+]?)%}`)
	floatRe  = regexp.MustCompile(`^(\d+_)*\d+((\.(\d+_)*\d+)?[eE][+\-]?(\d+_)*\d+|\.(\d+_)*\d+)`)
	intRe    = regexp.MustCompile(`^(\d+_)*\d+`)
)

// operators, longest first.
var operators = []string{
	"//", "**", "==", "!=", "<=", ">=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
	"<", ">", "=", ".", ":", "|", ",", ";",
}

func (lx *lexer) isRaw() bool { return rawBegin.MatchString(lx.src[lx.pos:]) }

// raw copies everything up to {% endraw %} as text.
func (lx *lexer) raw() error {
	m := rawBegin.FindStringSubmatch(lx.src[lx.pos:])
	lx.pos += len(m[0])
	if m[1] == "-" {
		rest := strings.TrimLeftFunc(lx.src[lx.pos:], isSpace)
		lx.pos = len(lx.src) - len(rest)
	}
	loc := rawEnd.FindStringSubmatchIndex(lx.src[lx.pos:])
	if loc == nil {
		return fmt.Errorf("%w: line %d: missing end of raw directive", ErrSyntax, lx.line)
	}
	body := lx.src[lx.pos : lx.pos+loc[0]]
	if lx.src[lx.pos+loc[2]:lx.pos+loc[3]] == "-" {
		body = strings.TrimRightFunc(body, isSpace)
	}
	lx.lineStarting = false
	lx.text(body)
	endSign := lx.src[lx.pos+loc[4] : lx.pos+loc[5]]
	lx.pos += loc[1] - len("%}")
	lx.closeTag("%}", endSign == "-")
	return nil
}

func (lx *lexer) token() (token, error) {
	rest := lx.src[lx.pos:]
	c := rest[0]
	t := token{line: lx.line}
	switch {
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		n := 1
		for n < len(rest) && isIdent(rest[n]) {
			n++
		}
		t.kind, t.val = tokName, rest[:n]
	case c >= '0' && c <= '9':
		m := floatRe.FindString(rest)
		t.kind = tokFloat
		if m == "" {
			m, t.kind = intRe.FindString(rest), tokInt
		}
		t.val = strings.ReplaceAll(m, "_", "")
		lx.pos += len(m)
		return t, nil
	case c == '\'' || c == '"':
		return lx.stringToken(rest, c)
	default:
		for _, op := range operators {
			if strings.HasPrefix(rest, op) {
				t.kind, t.val = tokOp, op
				lx.pos += len(op)
				return t, nil
			}
		}
		return t, fmt.Errorf("%w: line %d: unexpected char %q", ErrSyntax, lx.line, c)
	}
	lx.pos += len(t.val)
	return t, nil
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (lx *lexer) stringToken(rest string, q byte) (token, error) {
	for i := 1; i < len(rest); i++ {
		switch rest[i] {
		case '\\':
			i++
		case q:
			body := rest[1:i]
			lx.line += strings.Count(body, "\n")
			lx.pos += i + 1
			return token{kind: tokString, val: unescape(body), line: lx.line}, nil
		}
	}
	return token{}, fmt.Errorf("%w: line %d: unterminated string", ErrSyntax, lx.line)
}

// unescape applies Python's unicode-escape decoding to a string literal.
func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		i = unescapeOne(&b, s, i)
	}
	return b.String()
}

var simpleEscapes = map[byte]string{
	'n': "\n", 't': "\t", 'r': "\r", '\\': "\\", '\'': "'", '"': "\"",
	'a': "\a", 'b': "\b", 'f': "\f", 'v': "\v", '\n': "",
}

// unescapeOne writes the escape whose letter is at s[i] and returns the
// index of its last byte.
func unescapeOne(b *strings.Builder, s string, i int) int {
	if r, ok := simpleEscapes[s[i]]; ok {
		b.WriteString(r)
		return i
	}
	width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[s[i]]
	if width > 0 && i+width < len(s)+0 && i+1+width <= len(s) {
		if n, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32); err == nil && n <= utf8.MaxRune {
			b.WriteRune(rune(n))
			return i + width
		}
	}
	if s[i] >= '0' && s[i] <= '7' {
		j := i
		for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
			j++
		}
		n, _ := strconv.ParseUint(s[i:j], 8, 32)
		b.WriteRune(rune(n))
		return j - 1
	}
	b.WriteByte('\\')
	b.WriteByte(s[i])
	return i
}
