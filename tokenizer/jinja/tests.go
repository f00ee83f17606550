package jinja

import (
	"fmt"
	"strings"
	"unicode"
)

type testFunc func(v Value, args []Value) (bool, error)

var tests map[string]testFunc

func init() {
	tests = map[string]testFunc{
		"defined":   func(v Value, _ []Value) (bool, error) { _, u := v.(Undefined); return !u, nil },
		"undefined": func(v Value, _ []Value) (bool, error) { _, u := v.(Undefined); return u, nil },
		"none":      func(v Value, _ []Value) (bool, error) { return v == nil, nil },
		"string":    func(v Value, _ []Value) (bool, error) { _, ok := v.(string); return ok, nil },
		"mapping":   func(v Value, _ []Value) (bool, error) { _, ok := v.(*Dict); return ok, nil },
		"number":    func(v Value, _ []Value) (bool, error) { _, ok := number(v); return ok, nil },
		"integer":   func(v Value, _ []Value) (bool, error) { _, ok := v.(int64); return ok, nil },
		"float":     func(v Value, _ []Value) (bool, error) { _, ok := v.(float64); return ok, nil },
		"boolean":   func(v Value, _ []Value) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":      func(v Value, _ []Value) (bool, error) { return v == true, nil },
		"false":     func(v Value, _ []Value) (bool, error) { return v == false, nil },
		"sequence":  sequenceTest,
		"iterable":  iterableTest,
		"callable":  func(v Value, _ []Value) (bool, error) { _, ok := v.(callable); return ok, nil },
		"odd":       parityTest(1),
		"even":      parityTest(0),
		"lower":     func(v Value, _ []Value) (bool, error) { return casedAll(str(v), unicode.IsLower), nil },
		"upper":     func(v Value, _ []Value) (bool, error) { return casedAll(str(v), unicode.IsUpper), nil },
		"in":        inTest,
		"sameas":    sameasTest,
		"divisibleby": func(v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("%w: divisibleby takes one argument", ErrType)
			}
			m, err := binaryOp(nil, "%", v, args[0])
			return err == nil && equal(m, int64(0)), err
		},
	}
	for _, op := range []struct{ names, op string }{
		{"==,eq,equalto", "=="},
		{"!=,ne", "!="},
		{"<,lt,lessthan", "<"},
		{"<=,le", "<="},
		{">,gt,greaterthan", ">"},
		{">=,ge", ">="},
	} {
		for _, n := range strings.Split(op.names, ",") {
			tests[n] = compareTest(op.op)
		}
	}
}

func sequenceTest(v Value, _ []Value) (bool, error) {
	switch x := v.(type) {
	case string, *Dict, Undefined:
		return true, nil
	case *List:
		return !x.Gen, nil
	}
	return false, nil
}

func iterableTest(v Value, _ []Value) (bool, error) {
	switch v.(type) {
	case string, *Dict, *List, Undefined:
		return true, nil
	}
	return false, nil
}

// parityTest is jinja2's odd/even: value % 2 == 1 (or == 0).
func parityTest(want int64) testFunc {
	return func(v Value, _ []Value) (bool, error) {
		m, err := binaryOp(nil, "%", v, int64(2))
		if err != nil {
			return false, err
		}
		return equal(m, want), nil
	}
}

func inTest(v Value, args []Value) (bool, error) {
	if len(args) != 1 {
		return false, fmt.Errorf("%w: in takes one argument", ErrType)
	}
	return contains(args[0], v)
}

func sameasTest(v Value, args []Value) (bool, error) {
	if len(args) != 1 {
		return false, fmt.Errorf("%w: sameas takes one argument", ErrType)
	}
	switch x := v.(type) {
	case nil, bool:
		return v == args[0], nil
	case int64:
		y, ok := args[0].(int64)
		return ok && x == y && x >= -5 && x <= 256, nil
	case *List, *Dict, *Namespace:
		return v == args[0], nil
	}
	return false, nil
}

func compareTest(op string) testFunc {
	return func(v Value, args []Value) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("%w: comparison test takes one argument", ErrType)
		}
		return compareOp(op, v, args[0])
	}
}

// casedAll is Python's str.islower/isupper: at least one cased character,
// and every cased character passes is.
func casedAll(s string, is func(rune) bool) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) {
			if !is(r) {
				return false
			}
			cased = true
		}
	}
	return cased
}
