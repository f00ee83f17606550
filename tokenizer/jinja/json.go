package jinja

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting FromJSON accepts.
const maxJSONDepth = 256

// FromJSON decodes JSON into a Value as Python's json.loads does: objects
// become *Dict with their key order (a repeated key keeps its first place
// and its last value), integers int64, other numbers float64. Invalid UTF-8
// in strings becomes U+FFFD, as encoding/json does.
func FromJSON(data []byte) (Value, error) {
	d := jsonDecoder{data: data}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("jinja: json: %w", err)
	}
	if d.space(); d.pos != len(d.data) {
		return nil, errors.New("jinja: json: trailing data")
	}
	return v, nil
}

// jsonDecoder is a recursive-descent JSON reader straight into Values: the
// chat request of every routed chat completion goes through it, so it
// makes no intermediate tokens.
type jsonDecoder struct {
	data []byte
	pos  int
	buf  []byte // unescaping scratch
}

func (d *jsonDecoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	if d.pos >= len(d.data) {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("offset %d: "+format, append([]any{d.pos}, args...)...)
}

// value reads one value; d.pos is at its first byte.
func (d *jsonDecoder) value(depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("%w: nesting deeper than %d", ErrLimit, maxJSONDepth)
	}
	if d.pos >= len(d.data) {
		return nil, io.ErrUnexpectedEOF
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case d.literal("true"):
		return true, nil
	case d.literal("false"):
		return false, nil
	case d.literal("null"):
		return nil, nil
	default:
		return nil, d.errorf("invalid character %q looking for a value", c)
	}
}

func (d *jsonDecoder) literal(word string) bool {
	if !bytes.HasPrefix(d.data[d.pos:], []byte(word)) {
		return false
	}
	d.pos += len(word)
	return true
}

func (d *jsonDecoder) object(depth int) (Value, error) {
	d.pos++ // {
	obj := NewDict()
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return obj, nil
	}
	for {
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.errorf("want an object key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.errorf("want ':' after an object key")
		}
		d.pos++
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj.SetString(k, v)
		d.space()
		if d.pos >= len(d.data) {
			return nil, io.ErrUnexpectedEOF
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			d.space()
		case '}':
			d.pos++
			return obj, nil
		default:
			return nil, d.errorf("want ',' or '}' in an object")
		}
	}
}

func (d *jsonDecoder) array(depth int) (Value, error) {
	d.pos++ // [
	l := &List{}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return l, nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		l.Items = append(l.Items, v)
		d.space()
		if d.pos >= len(d.data) {
			return nil, io.ErrUnexpectedEOF
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
			d.space()
		case ']':
			d.pos++
			return l, nil
		default:
			return nil, d.errorf("want ',' or ']' in an array")
		}
	}
}

// number reads a JSON number (RFC 8259 grammar).
func (d *jsonDecoder) number() (Value, error) {
	start, p := d.pos, d.data
	i := start
	if i < len(p) && p[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(p) && p[i] >= '0' && p[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	switch {
	case i < len(p) && p[i] == '0':
		i++
	case digits() == 0:
		d.pos = i
		return nil, d.errorf("invalid number")
	}
	if i < len(p) && p[i] == '.' {
		i++
		if digits() == 0 {
			d.pos = i
			return nil, d.errorf("invalid number")
		}
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		if digits() == 0 {
			d.pos = i
			return nil, d.errorf("invalid number")
		}
	}
	d.pos = i
	return jsonNumber(string(p[start:i]))
}

// str reads a string; d.pos is at its opening quote.
func (d *jsonDecoder) str() (string, error) {
	p := d.data
	start := d.pos + 1
	i := start
	for i < len(p) && p[i] != '"' && p[i] != '\\' && p[i] >= 0x20 && p[i] < utf8.RuneSelf {
		i++
	}
	if i < len(p) && p[i] == '"' { // plain ASCII: the common case
		d.pos = i + 1
		return string(p[start:i]), nil
	}
	buf := d.buf[:0]
	buf = append(buf, p[start:i]...)
	for {
		if i >= len(p) {
			d.pos = i
			return "", io.ErrUnexpectedEOF
		}
		switch c := p[i]; {
		case c == '"':
			d.pos, d.buf = i+1, buf
			return string(buf), nil
		case c < 0x20:
			d.pos = i
			return "", d.errorf("control character %#x in a string", c)
		case c == '\\':
			if i+1 >= len(p) {
				d.pos = len(p)
				return "", io.ErrUnexpectedEOF
			}
			i++
			switch e := p[i]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, n := d.escapedRune(i + 1)
				if n < 0 {
					d.pos = i
					return "", d.errorf("invalid \\u escape")
				}
				buf, i = utf8.AppendRune(buf, r), i+n
			default:
				d.pos = i
				return "", d.errorf("invalid escape %q", e)
			}
			i++
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && size == 1 {
				buf = utf8.AppendRune(buf, utf8.RuneError)
			} else {
				buf = append(buf, p[i:i+size]...)
			}
			i += size
		}
	}
}

// escapedRune reads the hex digits of a \u escape starting at i (and the
// low half of a surrogate pair after it): the rune and the bytes read, or
// n < 0 when the digits are invalid. Unpaired surrogates become U+FFFD.
func (d *jsonDecoder) escapedRune(i int) (r rune, n int) {
	hex4 := func(at int) rune {
		if at+4 > len(d.data) {
			return -1
		}
		var v rune
		for _, c := range d.data[at : at+4] {
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				v = v<<4 | rune(c-'A'+10)
			default:
				return -1
			}
		}
		return v
	}
	r = hex4(i)
	if r < 0 {
		return 0, -1
	}
	if utf16.IsSurrogate(r) {
		if i+5 < len(d.data) && d.data[i+4] == '\\' && d.data[i+5] == 'u' {
			if lo := hex4(i + 6); lo >= 0 {
				if pair := utf16.DecodeRune(r, lo); pair != utf8.RuneError {
					return pair, 10
				}
			}
		}
		return utf8.RuneError, 4
	}
	return r, 4
}

func jsonNumber(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		return nil, fmt.Errorf("%w: integer %s out of range", ErrLimit, s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, err
	}
	return f, nil
}

// jsonOptions are json.dumps' arguments as transformers' tojson passes them.
type jsonOptions struct {
	indent    string
	hasIndent bool
	itemSep   string
	keySep    string
	sortKeys  bool
	maxLen    int // 0: maxReprLen
}

// ToJSON encodes v as Python's json.dumps(v, ensure_ascii=False) does, so
// that FromJSON (and json.loads) read back the same value, floats included.
func ToJSON(v Value) (string, error) { return toJSON(v, jsonOptions{itemSep: ", ", keySep: ": "}) }

// toJSON is json.dumps(v, ensure_ascii=False, ...).
func toJSON(v Value, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v Value, o jsonOptions, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: tojson nesting deeper than %d", ErrLimit, maxJSONDepth)
	}
	if b.Len() > o.maxLen && o.maxLen > 0 || b.Len() > maxReprLen {
		return fmt.Errorf("%w: tojson output too long", ErrLimit)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(jsonFloat(x))
	case string:
		writeJSONString(b, x)
	case *List:
		if x.Gen {
			return fmt.Errorf("%w: Object of type generator is not JSON serializable", ErrType)
		}
		return writeJSONList(b, x.Items, o, depth)
	case *Dict:
		return writeJSONDict(b, x, o, depth)
	default:
		return fmt.Errorf("%w: Object of type %s is not JSON serializable", ErrType, typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return formatFloat(f)
}

func newline(b *strings.Builder, o jsonOptions, depth int) {
	if o.hasIndent {
		b.WriteByte('\n')
		for range depth {
			b.WriteString(o.indent)
		}
	}
}

func writeJSONList(b *strings.Builder, items []Value, o jsonOptions, depth int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		newline(b, o, depth+1)
		if err := writeJSON(b, it, o, depth+1); err != nil {
			return err
		}
	}
	newline(b, o, depth)
	b.WriteByte(']')
	return nil
}

func writeJSONDict(b *strings.Builder, d *Dict, o jsonOptions, depth int) error {
	if d.Len() == 0 {
		b.WriteString("{}")
		return nil
	}
	order, err := jsonKeyOrder(d, o.sortKeys)
	if err != nil {
		return err
	}
	b.WriteByte('{')
	for n, i := range order {
		if n > 0 {
			b.WriteString(o.itemSep)
		}
		newline(b, o, depth+1)
		if err := writeJSONKey(b, d.keys[i]); err != nil {
			return err
		}
		b.WriteString(o.keySep)
		if err := writeJSON(b, d.vals[i], o, depth+1); err != nil {
			return err
		}
	}
	newline(b, o, depth)
	b.WriteByte('}')
	return nil
}

func jsonKeyOrder(d *Dict, sortKeys bool) ([]int, error) {
	order := make([]int, d.Len())
	for i := range order {
		order[i] = i
	}
	if !sortKeys {
		return order, nil
	}
	var err error
	sort.SliceStable(order, func(a, b int) bool {
		c, e := compare(d.keys[order[a]], d.keys[order[b]])
		if e != nil {
			err = e
		}
		return c < 0
	})
	return order, err
}

func writeJSONKey(b *strings.Builder, k Value) error {
	switch x := k.(type) {
	case string:
		writeJSONString(b, x)
	case nil:
		b.WriteString(`"null"`)
	case bool, int64:
		b.WriteString(`"` + strings.ToLower(str(x)) + `"`)
	case float64:
		b.WriteString(`"` + jsonFloat(x) + `"`)
	default:
		return fmt.Errorf("%w: keys must be str, int, float, bool or None, not %s", ErrType, typeName(k))
	}
	return nil
}

// writeJSONString writes s as json.dumps with ensure_ascii=False does.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		start = i + 1
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			b.WriteString(`\u00` + hex2(int(c)))
		}
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}
