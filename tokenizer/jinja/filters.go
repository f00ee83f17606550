package jinja

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(r *renderer, v Value, args []Value, kw kwargs) (Value, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"tojson":     tojsonFilter,
		"trim":       trimFilter,
		"length":     lengthFilter,
		"count":      lengthFilter,
		"join":       joinFilter,
		"items":      itemsFilter,
		"dictsort":   dictsortFilter,
		"selectattr": selectFilter(true, false),
		"rejectattr": selectFilter(true, true),
		"select":     selectFilter(false, false),
		"reject":     selectFilter(false, true),
		"map":        mapFilter,
		"list":       listFilter,
		"string":     func(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) { return str(v), nil },
		"safe":       func(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) { return str(v), nil },
		"default":    defaultFilter,
		"d":          defaultFilter,
		"first":      firstFilter,
		"last":       lastFilter,
		"int":        intFilter,
		"float":      floatFilter,
		"lower":      strFilter(lower),
		"upper":      strFilter(upper),
		"capitalize": strFilter(capitalize),
		"title":      strFilter(jinjaTitle),
		"replace":    replaceFilter,
		"abs":        absFilter,
		"round":      roundFilter,
		"unique":     uniqueFilter,
		"reverse":    reverseFilter,
		"sort":       sortFilter,
		"sum":        sumFilter,
		"indent":     indentFilter,
		"attr":       attrFilter,
		"e":          strFilter(htmlEscape),
		"escape":     strFilter(htmlEscape),
		"wordcount":  wordcountFilter,
		"format":     formatFilter,
		"min":        minMaxFilter(-1),
		"max":        minMaxFilter(1),
	}
}

// arg returns the i-th positional argument or the keyword argument name.
func arg(args []Value, kw kwargs, i int, name string, def Value) Value {
	if v, ok := kw.get(name); ok {
		return v
	}
	if i < len(args) {
		return args[i]
	}
	return def
}

func tojsonFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	o := jsonOptions{itemSep: ", ", keySep: ": ", maxLen: r.limits.MaxOutput}
	asciiOnly := truthy(arg(args, kw, 0, "ensure_ascii", false))
	switch ind := arg(args, kw, 1, "indent", nil).(type) {
	case nil:
	case int64:
		o.hasIndent, o.indent, o.itemSep = true, strings.Repeat(" ", int(max(min(ind, 64), 0))), ","
	case string:
		o.hasIndent, o.indent, o.itemSep = true, ind, ","
	default:
		return nil, fmt.Errorf("%w: indent must be int or str", ErrType)
	}
	if sep := arg(args, kw, 2, "separators", nil); sep != nil {
		l, ok := sep.(*List)
		if !ok || len(l.Items) != 2 {
			return nil, fmt.Errorf("%w: separators must be a pair", ErrValue)
		}
		o.itemSep, o.keySep = str(l.Items[0]), str(l.Items[1])
	}
	o.sortKeys = truthy(arg(args, kw, 3, "sort_keys", false))
	out, err := toJSON(v, o)
	if err != nil || !asciiOnly {
		return out, err
	}
	return asciiEscape(out), nil
}

// asciiEscape escapes non-ASCII as \uXXXX (ensure_ascii=True).
func asciiEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func trimFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	return stringMethods["strip"](r, str(v), []Value{arg(args, kw, 0, "chars", nil)}, kwargs{})
}

func length(v Value) (int64, error) {
	switch x := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(x)), nil
	case *List:
		if !x.Gen {
			return int64(len(x.Items)), nil
		}
	case *Dict:
		return int64(x.Len()), nil
	case Undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("%w: object of type '%s' has no len()", ErrType, typeName(v))
}

func lengthFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) { return length(v) }

func joinFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if a := arg(args, kw, 1, "attribute", nil); a != nil {
		if items, err = mapAttr(items, a, nil); err != nil {
			return nil, err
		}
	}
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = str(it)
	}
	out := strings.Join(parts, str(arg(args, kw, 0, "d", "")))
	return out, r.checkLen(len(out))
}

func itemsFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	switch x := v.(type) {
	case Undefined:
		return &List{Gen: true}, nil
	case *Dict:
		l, err := dictMethod(x, "items", nil)
		l.(*List).Gen, l.(*List).View = true, ""
		return l, err
	}
	return nil, fmt.Errorf("%w: can only get item pairs from a mapping", ErrType)
}

func listFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	items, err := iterate(v)
	return &List{Items: append([]Value(nil), items...)}, err
}

func defaultFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	_, undef := v.(Undefined)
	if undef || (truthy(arg(args, kw, 1, "boolean", false)) && !truthy(v)) {
		return arg(args, kw, 0, "default_value", ""), nil
	}
	return v, nil
}

func firstFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func lastFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	if l, ok := v.(*List); ok && l.Gen {
		return nil, fmt.Errorf("%w: 'generator' object is not reversible", ErrType)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

// wordcountFilter counts runs of word characters (regexp \w+).
func wordcountFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	n, in := int64(0), false
	for _, r := range str(v) {
		w := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.No, r)
		if w && !in {
			n++
		}
		in = w
	}
	return n, nil
}

func intFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	def := arg(args, kw, 0, "default", int64(0))
	switch x := v.(type) {
	case Undefined:
		return nil, x.err()
	case bool, int64:
		n, _ := integer(x)
		return n, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) >= 1<<63 {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.ReplaceAll(strings.TrimFunc(x, isSpace), "_", "")
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	}
	return def, nil
}

func floatFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	switch x := v.(type) {
	case Undefined:
		return nil, x.err()
	case bool, int64, float64:
		f, _ := number(x)
		return f, nil
	case string:
		s := strings.TrimFunc(x, isSpace)
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil || strings.Contains(err.Error(), "range") {
			return f, nil
		}
	}
	return arg(args, kw, 0, "default", 0.0), nil
}

func strFilter(f func(string) string) filterFunc {
	return func(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) { return f(str(v)), nil }
}

// jinjaTitle is jinja2's title filter: words start after "-", whitespace
// or an opening bracket.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		if r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || isSpace(r) {
			start = true
			b.WriteRune(r)
			continue
		}
		if start {
			b.WriteString(upper(string(r)))
		} else {
			b.WriteString(lower(string(r)))
		}
		start = false
	}
	return b.String()
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&#34;", "'", "&#39;").Replace(s)
}

func replaceFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	old, repl := str(arg(args, kw, 0, "old", "")), str(arg(args, kw, 1, "new", ""))
	n := -1
	if c := arg(args, kw, 2, "count", nil); c != nil {
		i, _ := integer(c)
		n = int(max(min(i, 1<<30), -1))
	}
	return pyReplace(r, str(v), old, repl, n)
}

func absFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	switch x := v.(type) {
	case bool, int64:
		n, _ := integer(x)
		if n == math.MinInt64 {
			return nil, errOverflow
		}
		return absInt(n), nil
	case float64:
		return math.Abs(x), nil
	}
	return nil, fmt.Errorf("%w: bad operand type for abs(): '%s'", ErrType, typeName(v))
}

// formatFilter is value|format(args...): Python's str(value) % args (or %
// kwargs).
func formatFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	if len(args) > 0 && len(kw.names) > 0 {
		return nil, fmt.Errorf("%w: can't handle positional and keyword arguments at the same time", ErrType)
	}
	if len(kw.names) > 0 {
		d := NewDict()
		for i, n := range kw.names {
			d.SetString(n, kw.vals[i])
		}
		return printf(str(v), d)
	}
	return printf(str(v), &List{Items: args, Tuple: true})
}

// minMaxFilter is min (sign -1) or max (sign 1), case-insensitive for
// strings unless case_sensitive, optionally by attribute.
func minMaxFilter(sign int) filterFunc {
	return func(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		cs := truthy(arg(args, kw, 0, "case_sensitive", false))
		attr := arg(args, kw, 1, "attribute", nil)
		var best, bestKey Value
		for i, it := range items {
			k := it
			if attr != nil {
				if k, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			k = sortKey(k, cs)
			if i > 0 {
				c, err := compare(k, bestKey)
				if err != nil {
					return nil, fmt.Errorf("%w: '<' not supported between instances of '%s' and '%s'", ErrType, typeName(k), typeName(bestKey))
				}
				if c*sign <= 0 {
					continue
				}
			}
			best, bestKey = it, k
		}
		if len(items) == 0 {
			return Undefined{Name: "No aggregated item, sequence was empty."}, nil
		}
		return best, nil
	}
}
