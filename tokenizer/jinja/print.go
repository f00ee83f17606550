package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// str is Python's str(v) as jinja2 prints it.
func str(v Value) string { return strMax(v, maxReprLen) }

// strMax is str that stops printing containers beyond about limit bytes.
func strMax(v Value, limit int) string {
	switch x := v.(type) {
	case string:
		return x
	case Undefined:
		return ""
	}
	var b strings.Builder
	writeRepr(&b, v, 0, limit)
	return b.String()
}

// repr is Python's repr(v).
func repr(v Value) string {
	limit := maxReprLen
	var b strings.Builder
	writeRepr(&b, v, 0, limit)
	return b.String()
}

// maxReprDepth bounds printing nested values (a namespace may hold
// itself), maxReprLen their printed length (values that share parts can
// print exponentially long); the render's output limit fails the result.
const (
	maxReprDepth = 256
	maxReprLen   = 16 << 20
)

func writeRepr(b *strings.Builder, v Value, depth, limit int) {
	if depth > maxReprDepth || b.Len() > limit {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
		b.WriteString("Undefined")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(formatFloat(x))
	case string:
		writeStringRepr(b, x)
	case *List:
		writeListRepr(b, x, depth, limit)
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1, limit)
			b.WriteString(": ")
			writeRepr(b, x.vals[i], depth+1, limit)
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.attrs, depth+1, limit)
		b.WriteByte('>')
	default:
		b.WriteString("<" + typeName(v) + ">")
	}
}

func writeListRepr(b *strings.Builder, l *List, depth, limit int) {
	if l.Gen {
		b.WriteString("<generator object>")
		return
	}
	if l.Repr != "" {
		b.WriteString(l.Repr)
		return
	}
	if l.View != "" {
		b.WriteString(l.View + "(")
		defer b.WriteByte(')')
	}
	open, end := "[", "]"
	if l.Tuple {
		open, end = "(", ")"
	}
	b.WriteString(open)
	for i, it := range l.Items {
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, it, depth+1, limit)
	}
	if l.Tuple && len(l.Items) == 1 {
		b.WriteByte(',')
	}
	b.WriteString(end)
}

// formatFloat is Python's repr of a float: the shortest round-tripping
// digits, positional for exponents -4..15, else d.ddde+XX.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp < -4 || exp >= 16 {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		out += "e" + sign + es
	} else {
		out = positional(digits, exp)
	}
	if neg {
		return "-" + out
	}
	return out
}

func positional(digits string, exp int) string {
	if exp < 0 {
		return "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return digits[:exp+1] + "." + digits[exp+1:]
}

// writeStringRepr quotes s as Python's repr does.
func writeStringRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteRune(r)
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			b.WriteString(`\x`)
			b.WriteString(hex2(int(r)))
		case r >= 0x80 && !isPrintable(r):
			writeEscape(b, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

func isPrintable(r rune) bool {
	return r == ' ' || (unicode.IsPrint(r) && !unicode.Is(unicode.Zs, r))
}

func writeEscape(b *strings.Builder, r rune) {
	h := strconv.FormatInt(int64(r), 16)
	switch {
	case r < 0x100:
		b.WriteString(`\x` + hex2(int(r)))
	case r < 0x10000:
		b.WriteString(`\u` + strings.Repeat("0", 4-len(h)) + h)
	default:
		b.WriteString(`\U` + strings.Repeat("0", 8-len(h)) + h)
	}
}

func hex2(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>4], digits[n&15]})
}
