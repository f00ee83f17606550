package jinja

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// method is a bound method of a built-in value.
type method struct {
	recv Value
	name string
}

func (m *method) call(r *renderer, args []Value, kw kwargs) (Value, error) {
	switch x := m.recv.(type) {
	case string:
		return stringMethods[m.name](r, x, args, kw)
	case *Dict:
		return dictMethod(x, m.name, args)
	case *List:
		return listMethod(x, m.name, args)
	case *loopState:
		if m.name == "cycle" {
			return x.cycle(args)
		}
		return x.changedCall(args)
	}
	return nil, fmt.Errorf("%w: not callable", ErrType)
}

// isUnsafeMethod reports the methods the immutable sandbox refuses: they
// modify their receiver (dict or list).
func isUnsafeMethod(list bool, name string) bool {
	switch name {
	case "clear", "pop":
		return true
	case "popitem", "setdefault", "update":
		return !list
	case "append", "extend", "insert", "remove", "reverse", "sort":
		return list
	}
	return false
}

// isDictMethod and isListMethod report the methods templates may call.
func isDictMethod(name string) bool {
	switch name {
	case "items", "keys", "values", "get", "copy":
		return true
	}
	return false
}

func isListMethod(name string) bool {
	switch name {
	case "index", "count", "copy":
		return true
	}
	return false
}

func unsafeAttr(obj Value, name string) Undefined {
	return Undefined{Name: name, unsafe: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj))}
}

// getattr is jinja2's sandboxed environment.getattr: an attribute, else an
// item, else undefined.
func getattr(obj Value, name string) (Value, error) {
	if u, ok := obj.(Undefined); ok {
		return nil, u.err()
	}
	if strings.HasPrefix(name, "_") {
		return unsafeAttr(obj, name), nil
	}
	if v, ok := builtinAttr(obj, name); ok {
		return v, nil
	}
	switch x := obj.(type) {
	case *Dict:
		if v, ok := x.Get(name); ok {
			return v, nil
		}
	case *Namespace:
		if v, ok := x.attrs.Get(name); ok {
			return v, nil
		}
	}
	return Undefined{owner: typeName(obj), attr: name}, nil
}

// builtinAttr returns a Python attribute of a built-in value.
func builtinAttr(obj Value, name string) (Value, bool) {
	switch x := obj.(type) {
	case string:
		if _, ok := stringMethods[name]; ok {
			return &method{recv: x, name: name}, true
		}
	case *Dict:
		if isDictMethod(name) {
			return &method{recv: x, name: name}, true
		}
		if isUnsafeMethod(false, name) {
			return unsafeAttr(obj, name), true
		}
	case *List:
		if isListMethod(name) {
			return &method{recv: x, name: name}, true
		}
		if isUnsafeMethod(true, name) {
			return unsafeAttr(obj, name), true
		}
	case *loopState:
		return x.attr(name)
	}
	return nil, false
}

// getitem is jinja2's environment.getitem: an item, else (for a string
// key) an attribute, else undefined.
func getitem(obj, key Value) (Value, error) {
	if u, ok := obj.(Undefined); ok {
		return nil, u.err()
	}
	if v, ok := item(obj, key); ok {
		return v, nil
	}
	if name, ok := key.(string); ok {
		if _, isDict := obj.(*Dict); !isDict || !strings.HasPrefix(name, "_") {
			return getattr(obj, name)
		}
		return unsafeAttr(obj, name), nil
	}
	return Undefined{Name: fmt.Sprintf("%s object has no element %s", typeName(obj), repr(key))}, nil
}

func item(obj, key Value) (Value, bool) {
	switch x := obj.(type) {
	case *Dict:
		return x.Get(key)
	case *List:
		i, ok := integer(key)
		if !ok || x.Gen {
			return nil, false
		}
		if i < 0 {
			i += int64(len(x.Items))
		}
		if i < 0 || i >= int64(len(x.Items)) {
			return nil, false
		}
		return x.Items[i], true
	case string:
		i, ok := integer(key)
		if !ok {
			return nil, false
		}
		return runeAt(x, i)
	}
	return nil, false
}

// runeAt returns the i-th code point of s (negative from the end).
func runeAt(s string, i int64) (Value, bool) {
	if isASCII(s) {
		if i < 0 {
			i += int64(len(s))
		}
		if i < 0 || i >= int64(len(s)) {
			return nil, false
		}
		return s[i : i+1], true
	}
	runes := []rune(s)
	if i < 0 {
		i += int64(len(runes))
	}
	if i < 0 || i >= int64(len(runes)) {
		return nil, false
	}
	return string(runes[i]), true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// slice is Python's obj[lo:hi:step] for strings, lists and tuples (jinja2
// subscripts slices directly: other values fail).
func slice(obj Value, b [3]Value) (Value, error) {
	var n int
	var runes []rune
	switch x := obj.(type) {
	case string:
		runes = []rune(x)
		n = len(runes)
	case *List:
		if x.Gen {
			return nil, fmt.Errorf("%w: 'generator' object is not subscriptable", ErrType)
		}
		n = len(x.Items)
	case *Dict:
		return nil, fmt.Errorf("%w: unhashable type: 'slice'", ErrType)
	default:
		return nil, fmt.Errorf("%w: '%s' object is not subscriptable", ErrType, typeName(obj))
	}
	idx, ok := sliceIndices(n, b)
	if !ok {
		return nil, fmt.Errorf("%w: slice indices must be integers or None", ErrType)
	}
	if idx == nil && b[2] != nil {
		if s, _ := integer(b[2]); s == 0 {
			return nil, fmt.Errorf("%w: slice step cannot be zero", ErrValue)
		}
	}
	if runes != nil || obj == "" {
		out := make([]rune, len(idx))
		for i, j := range idx {
			out[i] = runes[j]
		}
		return string(out), nil
	}
	l := obj.(*List)
	items := make([]Value, len(idx))
	for i, j := range idx {
		items[i] = l.Items[j]
	}
	return &List{Items: items, Tuple: l.Tuple}, nil
}

// sliceIndices are the indices a Python slice selects from n items.
func sliceIndices(n int, b [3]Value) ([]int, bool) {
	get := func(v Value) (int64, bool, bool) { // value, present, ok
		if v == nil {
			return 0, false, true
		}
		i, ok := integer(v)
		return i, true, ok
	}
	step, hasStep, ok := get(b[2])
	if !ok {
		return nil, false
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return nil, true
	}
	lo, hasLo, ok1 := get(b[0])
	hi, hasHi, ok2 := get(b[1])
	if !ok1 || !ok2 {
		return nil, false
	}
	N := int64(n)
	clamp := func(i int64, lower, upper int64) int64 {
		if i < 0 {
			i += N
			if i < 0 {
				return lower
			}
		}
		return min(i, upper)
	}
	var out []int
	if step > 0 {
		lo, hi = clampOr(hasLo, lo, 0, clamp, 0, N), clampOr(hasHi, hi, N, clamp, 0, N)
		for i := lo; i < hi; i += step {
			out = append(out, int(i))
		}
		return out, true
	}
	lo, hi = clampOr(hasLo, lo, N-1, clamp, -1, N-1), clampOr(hasHi, hi, -1, clamp, -1, N-1)
	for i := lo; i > hi; i += step {
		out = append(out, int(i))
	}
	return out, true
}

func clampOr(has bool, v, def int64, clamp func(int64, int64, int64) int64, lower, upper int64) int64 {
	if !has {
		return def
	}
	return clamp(v, lower, upper)
}
