package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// attrPath looks up a dotted attribute ("a.b", "0") as jinja2's
// make_attrgetter does.
func attrPath(v Value, attr Value) (Value, error) {
	s, ok := attr.(string)
	if !ok {
		return getitem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var key Value = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getitem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func mapAttr(items []Value, attr, def Value) ([]Value, error) {
	out := make([]Value, len(items))
	for i, it := range items {
		v, err := attrPath(it, attr)
		if err != nil {
			return nil, err
		}
		if _, undef := v.(Undefined); undef && def != nil {
			v = def
		}
		out[i] = v
	}
	return out, nil
}

func mapFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	if !truthy(v) { // jinja2 iterates only a true value
		return &List{Gen: true}, nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if a, ok := kw.get("attribute"); ok {
		def, _ := kw.get("default")
		out, err := mapAttr(items, a, def)
		return &List{Items: out, Gen: true}, err
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("%w: map requires a filter argument", ErrType)
	}
	name, _ := args[0].(string)
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("%w: no filter named '%s'", ErrValue, name)
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = f(r, it, args[1:], kwargs{}); err != nil {
			return nil, err
		}
	}
	return &List{Items: out, Gen: true}, nil
}

// selectFilter is select, reject, selectattr and rejectattr.
func selectFilter(byAttr, reject bool) filterFunc {
	return func(_ *renderer, v Value, args []Value, _ kwargs) (Value, error) {
		if !truthy(v) { // jinja2 iterates only a true value
			return &List{Gen: true}, nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr Value
		if byAttr {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: missing attribute", ErrType)
			}
			attr, args = args[0], args[1:]
		}
		var test testFunc
		if len(args) > 0 {
			name, _ := args[0].(string)
			if test = tests[name]; test == nil {
				return nil, fmt.Errorf("%w: no test named '%s'", ErrValue, name)
			}
			args = args[1:]
		}
		var out []Value
		for _, it := range items {
			x := it
			if byAttr {
				if x, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(x)
			if test != nil {
				if ok, err = test(x, args); err != nil {
					return nil, err
				}
			}
			if ok != reject {
				out = append(out, it)
			}
		}
		return &List{Items: out, Gen: true}, nil
	}
}

// sortKey prepares a value for case-insensitive ordering.
func sortKey(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return lower(s)
	}
	return v
}

func sortValues(items []Value, key func(Value) (Value, error), rev bool) error {
	keys := make([]Value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	sort.SliceStable(idx, func(a, b int) bool {
		c, e := compare(keys[idx[a]], keys[idx[b]])
		if e != nil && err == nil {
			err = fmt.Errorf("%w: '<' not supported between instances of '%s' and '%s'", ErrType, typeName(keys[idx[a]]), typeName(keys[idx[b]]))
		}
		if rev {
			return c > 0
		}
		return c < 0
	})
	sorted := make([]Value, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return err
}

func dictsortFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("%w: dictsort needs a mapping", ErrType)
	}
	cs := truthy(arg(args, kw, 0, "case_sensitive", false))
	by := str(arg(args, kw, 1, "by", "key"))
	pos := 0
	switch by {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, fmt.Errorf("%w: You can only sort by either \"key\" or \"value\"", ErrValue)
	}
	l, _ := dictMethod(d, "items", nil)
	items := l.(*List).Items
	err := sortValues(items, func(it Value) (Value, error) {
		return sortKey(it.(*List).Items[pos], cs), nil
	}, truthy(arg(args, kw, 2, "reverse", false)))
	return &List{Items: items}, err
}

func sortFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]Value(nil), items...)
	rev := truthy(arg(args, kw, 0, "reverse", false))
	cs := truthy(arg(args, kw, 1, "case_sensitive", false))
	attr := arg(args, kw, 2, "attribute", nil)
	err = sortValues(items, func(it Value) (Value, error) {
		if attr != nil {
			x, err := attrPath(it, attr)
			return sortKey(x, cs), err
		}
		return sortKey(it, cs), nil
	}, rev)
	return &List{Items: items}, err
}

func uniqueFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	cs := truthy(arg(args, kw, 0, "case_sensitive", false))
	var out, seen []Value
	for _, it := range items {
		k := sortKey(it, cs)
		if _, ok := hashKey(k); !ok {
			return nil, fmt.Errorf("%w: unhashable type: '%s'", ErrType, typeName(k))
		}
		dup := false
		for _, s := range seen {
			if equal(s, k) {
				dup = true
				break
			}
		}
		if !dup {
			seen, out = append(seen, k), append(out, it)
		}
	}
	return &List{Items: out, Gen: true}, nil
}

func reverseFilter(_ *renderer, v Value, _ []Value, _ kwargs) (Value, error) {
	if s, ok := v.(string); ok {
		return slice(s, [3]Value{nil, nil, int64(-1)})
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return &List{Items: out, Gen: true}, nil
}

func sumFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if a := arg(args, kw, 0, "attribute", nil); a != nil {
		if items, err = mapAttr(items, a, nil); err != nil {
			return nil, err
		}
	}
	total := arg(args, kw, 1, "start", int64(0))
	for _, it := range items {
		if total, err = binaryOp(r, "+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func roundFilter(_ *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	prec, _ := integer(arg(args, kw, 0, "precision", int64(0)))
	method := str(arg(args, kw, 1, "method", "common"))
	f, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("%w: type %s doesn't define __round__ method", ErrType, typeName(v))
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "common":
		f = roundHalfEven(f, prec)
	case "ceil":
		f = math.Ceil(f*p) / p
	case "floor":
		f = math.Floor(f*p) / p
	default:
		return nil, fmt.Errorf("%w: method must be common, ceil or floor", ErrValue)
	}
	if _, isInt := integer(v); isInt && method == "common" {
		return int64(f), nil
	}
	return f, nil
}

func indentFilter(r *renderer, v Value, args []Value, kw kwargs) (Value, error) {
	ind := "    "
	switch w := arg(args, kw, 0, "width", int64(4)).(type) {
	case string:
		ind = w
	case int64:
		ind = strings.Repeat(" ", int(max(min(w, 1<<10), 0)))
	}
	first := truthy(arg(args, kw, 1, "first", false))
	blank := truthy(arg(args, kw, 2, "blank", false))
	text, ok := v.(string)
	if !ok {
		if u, isUndef := v.(Undefined); isUndef {
			return nil, u.err()
		}
		return nil, fmt.Errorf("%w: unsupported operand type(s) for +=: '%s' and 'str'", ErrType, typeName(v))
	}
	lines := strings.Split(normalizeNewlines(text+"\n"), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
			if l != "" || blank {
				b.WriteString(ind)
			}
		}
		b.WriteString(l)
		if err := r.checkLen(b.Len()); err != nil {
			return nil, err
		}
	}
	out := b.String()
	if first {
		out = ind + out
	}
	return out, nil
}

func attrFilter(_ *renderer, v Value, args []Value, _ kwargs) (Value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("%w: attr takes one argument", ErrType)
	}
	return getattr(v, str(args[0]))
}

// roundHalfEven is Python's round(f, prec): correctly rounded on the
// float's exact decimal value, ties to even.
func roundHalfEven(f float64, prec int64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return f
	}
	if prec < 0 {
		p := math.Pow(10, float64(-prec))
		return math.RoundToEven(f/p) * p
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(min(prec, 400)), 64), 64)
	return r
}
