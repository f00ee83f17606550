package jsonlex

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// Str reads a string.
func (l *Lexer) Str() (string, error) {
	b, err := l.StrBytes()
	return string(b), err
}

// StrBytes reads a string and returns its contents: a slice of the input
// when it holds no escapes (nor invalid UTF-8 to replace), else of a
// scratch buffer that the next StrBytes, Str or Skip may overwrite.
func (l *Lexer) StrBytes() ([]byte, error) {
	l.space()
	if l.pos >= len(l.data) || l.data[l.pos] != '"' {
		return nil, l.fail("want a string")
	}
	return l.str(&l.buf)
}

// str reads the string whose opening quote is at l.pos, unescaping into
// *scratch when it must.
func (l *Lexer) str(scratch *[]byte) ([]byte, error) {
	start := l.pos + 1
	end, high := plain(l.data, start)
	if end < len(l.data) && l.data[end] == '"' && (!high || utf8.Valid(l.data[start:end])) {
		l.pos = end + 1
		return l.data[start:end], nil
	}
	out, err := l.unquote(start, (*scratch)[:0])
	*scratch = out
	return out, err
}

// plain returns the offset of the first quote, backslash or control
// character at or after i (len(data) when there is none), and whether a
// byte at or over 0x80 comes before it. It reads eight bytes at a time:
// strings (prompts, messages, vocabularies) are almost all plain bytes.
func plain(data []byte, i int) (end int, high bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var seen uint64
	for ; i+8 <= len(data); i += 8 {
		w := binary.LittleEndian.Uint64(data[i:])
		q, b := w^(ones*'"'), w^(ones*'\\')
		// The lowest high bit set in special is exactly the first byte below
		// 0x20 or equal to '"' or '\\' (a zero byte of q or b): a borrow only
		// carries upward from such a byte.
		special := ((w-ones*0x20)&^w | (q-ones)&^q | (b-ones)&^b) & highs
		if special != 0 {
			n := bits.TrailingZeros64(special) / 8
			seen |= w & (1<<(8*n) - 1)
			return i + n, seen&highs != 0
		}
		seen |= w
	}
	for ; i < len(data); i++ {
		c := data[i]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		seen |= uint64(c)
	}
	return i, seen&highs != 0
}

// unquote reads the rest of a string from its content offset i, appending
// the unescaped contents to out.
func (l *Lexer) unquote(i int, out []byte) ([]byte, error) {
	data := l.data
	for {
		end, high := plain(data, i)
		var err error
		if out, err = l.appendText(out, i, end, high); err != nil {
			return out, err
		}
		if end >= len(data) {
			return out, l.failAt(end, "")
		}
		switch c := data[end]; {
		case c == '"':
			l.pos = end + 1
			return out, nil
		case c < 0x20:
			return out, l.failAt(end, "control character in a string")
		}
		var r rune
		if r, i, err = l.escape(end); err != nil {
			return out, err
		}
		if r < utf8.RuneSelf {
			out = append(out, byte(r))
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
}

// appendText appends data[i:end], a run without escapes, replacing or
// refusing invalid UTF-8 when high says it may hold some.
func (l *Lexer) appendText(out []byte, i, end int, high bool) ([]byte, error) {
	run := l.data[i:end]
	if !high || utf8.Valid(run) {
		return append(out, run...), nil
	}
	for j := 0; j < len(run); {
		r, n := utf8.DecodeRune(run[j:])
		if r == utf8.RuneError && n == 1 {
			if l.reject {
				return out, l.invalidUTF8(i + j)
			}
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, run[j:j+n]...)
		}
		j += n
	}
	return out, nil
}

func (l *Lexer) invalidUTF8(pos int) error {
	return &SyntaxError{Offset: pos, Msg: "invalid UTF-8 in a string", cause: ErrInvalidUTF8}
}

// escape decodes the escape whose backslash is at i, returning the rune
// and the offset after it. A \u escape of a high surrogate takes the low
// surrogate escape after it along; a surrogate without its other half
// reads as U+FFFD, as in encoding/json.
func (l *Lexer) escape(i int) (rune, int, error) {
	data := l.data
	if i+1 >= len(data) {
		return 0, 0, l.failAt(len(data), "")
	}
	switch c := data[i+1]; c {
	case '"', '\\', '/':
		return rune(c), i + 2, nil
	case 'b':
		return '\b', i + 2, nil
	case 'f':
		return '\f', i + 2, nil
	case 'n':
		return '\n', i + 2, nil
	case 'r':
		return '\r', i + 2, nil
	case 't':
		return '\t', i + 2, nil
	case 'u':
	default:
		return 0, 0, l.failAt(i, "invalid escape in a string")
	}
	if i+6 > len(data) {
		return 0, 0, l.failAt(len(data), "")
	}
	r := hex4(data, i+2)
	if r < 0 {
		return 0, 0, l.failAt(i, "invalid \\u escape")
	}
	if !utf16.IsSurrogate(r) {
		return r, i + 6, nil
	}
	if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
		if pair := utf16.DecodeRune(r, hex4(data, i+8)); pair != utf8.RuneError {
			return pair, i + 12, nil
		}
	}
	return utf8.RuneError, i + 6, nil
}

// hex4 decodes four hex digits at data[i:], or returns -1.
func hex4(data []byte, i int) rune {
	if i+4 > len(data) {
		return -1
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// skipString passes over the string whose opening quote is at l.pos,
// checking it as str would read it without unescaping it.
func (l *Lexer) skipString() error {
	data := l.data
	i := l.pos + 1
	start, anyHigh := i, false
	for {
		end, high := plain(data, i)
		anyHigh = anyHigh || high
		if end >= len(data) {
			return l.failAt(end, "")
		}
		switch c := data[end]; {
		case c == '"':
			if l.reject && anyHigh && !utf8.Valid(data[start:end]) {
				_, err := l.appendText(nil, start, end, true) // finds the offset
				return err
			}
			l.pos = end + 1
			return nil
		case c < 0x20:
			return l.failAt(end, "control character in a string")
		}
		var err error
		if _, i, err = l.escape(end); err != nil {
			return err
		}
	}
}
