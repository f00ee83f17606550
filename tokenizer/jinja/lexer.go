package jinja

import (
	"fmt"
	"strings"
	"unicode"
)

// tokKind is the kind of an expression token.
type tokKind uint8

const (
	tokEOF    tokKind = iota // end of the tag
	tokName                  // identifier or keyword
	tokString                // string literal (value unescaped)
	tokInt                   // integer literal
	tokFloat                 // float literal
	tokOp                    // operator or punctuation
)

type token struct {
	kind tokKind
	val  string
	line int
}

// segKind is the kind of a template segment.
type segKind uint8

const (
	segText  segKind = iota // literal output
	segPrint                // {{ ... }}
	segBlock                // {% ... %}
)

type segment struct {
	kind segKind
	text string  // segText
	toks []token // segPrint, segBlock
	line int
}

// normalizeNewlines does what jinja2's lexer does to the source first:
// Python's splitlines joined by "\n", so one trailing newline is dropped
// (keep_trailing_newline=False) and every line break becomes "\n".
func normalizeNewlines(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	for i := 0; i < len(src); {
		r, size := decodeRune(src, i)
		switch r {
		case '\r':
			if i+1 < len(src) && src[i+1] == '\n' {
				size = 2
			}
			b.WriteByte('\n')
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			b.WriteByte('\n')
		default:
			b.WriteString(src[i : i+size])
		}
		i += size
	}
	out := b.String()
	return strings.TrimSuffix(out, "\n")
}

// lexer splits template source into segments with jinja2's whitespace
// control, trim_blocks and lstrip_blocks.
type lexer struct {
	src          string
	pos          int
	line         int
	lineStarting bool
	segs         []segment
}

func lex(src string) ([]segment, error) {
	lx := &lexer{src: normalizeNewlines(src), line: 1, lineStarting: true}
	for lx.pos < len(lx.src) {
		if err := lx.next(); err != nil {
			return nil, err
		}
	}
	return lx.segs, nil
}

// tagStart finds the next "{{", "{%" or "{#" at or after i.
func (lx *lexer) tagStart(i int) int {
	for {
		j := strings.IndexByte(lx.src[i:], '{')
		if j < 0 || i+j+1 >= len(lx.src) {
			return -1
		}
		if c := lx.src[i+j+1]; c == '{' || c == '%' || c == '#' {
			return i + j
		}
		i += j + 1
	}
}

func (lx *lexer) next() error {
	start := lx.tagStart(lx.pos)
	if start < 0 {
		lx.text(lx.src[lx.pos:])
		lx.pos = len(lx.src)
		return nil
	}
	text := lx.src[lx.pos:start]
	kind := lx.src[start+1]
	sign := byte(0)
	if start+2 < len(lx.src) && (lx.src[start+2] == '-' || lx.src[start+2] == '+') {
		sign = lx.src[start+2]
	}
	switch {
	case sign == '-':
		text = strings.TrimRightFunc(text, isSpace)
	case sign != '+' && kind != '{':
		text = lx.lstrip(text)
	}
	lx.text(text)
	lx.pos = start + 2
	if sign != 0 {
		lx.pos++
	}
	switch kind {
	case '#':
		return lx.comment()
	case '{':
		return lx.tag(segPrint, "}}")
	}
	if lx.isRaw() {
		return lx.raw()
	}
	return lx.tag(segBlock, "%}")
}

// lstrip removes the spaces and tabs between the last line start and a
// block or comment tag (lstrip_blocks).
func (lx *lexer) lstrip(text string) string {
	l := strings.LastIndexByte(text, '\n') + 1
	if l == 0 && !lx.lineStarting {
		return text
	}
	if strings.TrimLeftFunc(text[l:], isSpace) == "" {
		return text[:l]
	}
	return text
}

func (lx *lexer) text(s string) {
	lx.line += strings.Count(s, "\n")
	if s != "" {
		lx.segs = append(lx.segs, segment{kind: segText, text: s})
	}
}

// closeTag consumes a tag end ("-" strips all following whitespace;
// block and comment ends drop one newline: trim_blocks).
func (lx *lexer) closeTag(end string, strip bool) {
	start := lx.pos
	lx.pos += len(end)
	switch {
	case strip:
		rest := strings.TrimLeftFunc(lx.src[lx.pos:], isSpace)
		lx.pos = len(lx.src) - len(rest)
	case end != "}}" && lx.pos < len(lx.src) && lx.src[lx.pos] == '\n':
		lx.pos++
	}
	consumed := lx.src[start:lx.pos]
	lx.line += strings.Count(consumed, "\n")
	lx.lineStarting = strings.HasSuffix(consumed, "\n")
}

func (lx *lexer) comment() error {
	i := strings.Index(lx.src[lx.pos:], "#}")
	if i < 0 {
		return fmt.Errorf("%w: line %d: missing end of comment tag", ErrSyntax, lx.line)
	}
	body := lx.src[lx.pos : lx.pos+i]
	lx.line += strings.Count(body, "\n")
	lx.pos += i
	lx.closeTag("#}", strings.HasSuffix(body, "-"))
	return nil
}

func (lx *lexer) tag(kind segKind, end string) error {
	seg := segment{kind: kind, line: lx.line}
	for {
		lx.skipSpace()
		if lx.pos >= len(lx.src) {
			return fmt.Errorf("%w: line %d: unexpected end of template, expected '%s'", ErrSyntax, seg.line, end)
		}
		rest := lx.src[lx.pos:]
		if strings.HasPrefix(rest, "-"+end) {
			lx.pos++
			lx.closeTag(end, true)
			break
		}
		if strings.HasPrefix(rest, "+"+end) && end == "%}" {
			lx.pos++
			lx.closeTag(end, false)
			break
		}
		if strings.HasPrefix(rest, end) {
			lx.closeTag(end, false)
			break
		}
		tok, err := lx.token()
		if err != nil {
			return err
		}
		seg.toks = append(seg.toks, tok)
	}
	lx.segs = append(lx.segs, seg)
	return nil
}

func (lx *lexer) skipSpace() {
	for lx.pos < len(lx.src) {
		r, size := decodeRune(lx.src, lx.pos)
		if !isSpace(r) {
			return
		}
		if r == '\n' {
			lx.line++
		}
		lx.pos += size
	}
}

// isSpace is Python's str.isspace for one character.
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}
