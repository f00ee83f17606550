package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

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
