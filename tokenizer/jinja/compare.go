package jinja

import (
	"fmt"
	"strings"
)

// compareOp evaluates one comparison of a chain.
func compareOp(op string, l, r Value) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in":
		return contains(r, l)
	case "notin":
		ok, err := contains(r, l)
		return !ok, err
	}
	c, err := compare(l, r)
	if err != nil {
		return false, fmt.Errorf("%w: '%s' not supported between instances of '%s' and '%s'", ErrType, op, typeName(l), typeName(r))
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	}
	return c >= 0, nil
}

// equal is Python's ==.
func equal(a, b Value) bool {
	if af, ok := number(a); ok {
		bf, ok := number(b)
		if ai, aok := integer(a); aok {
			if bi, bok := integer(b); bok {
				return ai == bi
			}
		}
		return ok && af == bf
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case *List:
		y, ok := b.(*List)
		return ok && (x == y || !x.Gen && !y.Gen && x.Tuple == y.Tuple && equalItems(x.Items, y.Items))
	case *Dict:
		y, ok := b.(*Dict)
		return ok && (x == y || equalDicts(x, y))
	}
	return a == b
}

func equalItems(a, b []Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !same(a[i], b[i]) && !equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func equalDicts(a, b *Dict) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i, k := range a.keys {
		v, ok := b.Get(k)
		if !ok || !equal(a.vals[i], v) {
			return false
		}
	}
	return true
}

var errUnordered = fmt.Errorf("%w: unorderable", ErrType)

// compare orders numbers, strings (by code point) and lists as Python does.
func compare(a, b Value) (int, error) {
	if af, ok := number(a); ok {
		bf, ok := number(b)
		if !ok {
			return 0, errUnordered
		}
		ai, aok := integer(a)
		bi, bok := integer(b)
		switch {
		case aok && bok:
			return cmpOrdered(ai, bi), nil
		default:
			return cmpOrdered(af, bf), nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case *List:
		if y, ok := b.(*List); ok && x.Tuple == y.Tuple {
			return compareItems(x.Items, y.Items)
		}
	case Undefined:
		return 0, x.err()
	}
	if u, ok := b.(Undefined); ok {
		return 0, u.err()
	}
	return 0, errUnordered
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareItems(a, b []Value) (int, error) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if equal(a[i], b[i]) {
			continue
		}
		return compare(a[i], b[i])
	}
	return cmpOrdered(int64(len(a)), int64(len(b))), nil
}

// contains is Python's item in container.
func contains(container, item Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("%w: 'in <string>' requires string as left operand, not %s", ErrType, typeName(item))
		}
		return strings.Contains(c, s), nil
	case *List:
		for _, it := range c.Items {
			if equal(it, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if _, undef := item.(Undefined); undef {
			return false, nil
		}
		if _, ok := hashKey(item); !ok {
			return false, fmt.Errorf("%w: unhashable type: '%s'", ErrType, typeName(item))
		}
		_, ok := c.Get(item)
		return ok, nil
	case Undefined:
		return false, nil
	}
	return false, fmt.Errorf("%w: argument of type '%s' is not iterable", ErrType, typeName(container))
}

// same reports whether a and b are the same container (Python compares
// list items by identity first).
func same(a, b Value) bool {
	switch x := a.(type) {
	case *List:
		y, ok := b.(*List)
		return ok && x == y
	case *Dict:
		y, ok := b.(*Dict)
		return ok && x == y
	}
	return false
}
