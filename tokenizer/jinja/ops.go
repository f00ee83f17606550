package jinja

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
)

var errOverflow = fmt.Errorf("%w: integer beyond 64 bits", ErrLimit)

func unsupported(op string, l, r Value) error {
	return fmt.Errorf("%w: unsupported operand type(s) for %s: '%s' and '%s'", ErrType, op, typeName(l), typeName(r))
}

// binaryOp is Python's l op r for + - * / // % **.
func binaryOp(r *renderer, op string, l, rv Value) (Value, error) {
	if fs, ok := l.(string); ok && op == "%" {
		return printf(fs, rv)
	}
	if u, ok := l.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := rv.(Undefined); ok {
		return nil, u.err()
	}
	li, lInt := integer(l)
	ri, rInt := integer(rv)
	if lInt && rInt {
		return intOp(op, li, ri)
	}
	lf, lNum := number(l)
	rf, rNum := number(rv)
	if lNum && rNum {
		return floatOp(op, lf, rf)
	}
	switch op {
	case "+":
		return add(r, l, rv)
	case "*":
		return repeat(r, l, rv)
	}
	return nil, unsupported(op, l, rv)
}

func intOp(op string, a, b int64) (Value, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return nil, errOverflow
		}
		return s, nil
	case "-":
		s := a - b
		if (s < a) != (b > 0) {
			return nil, errOverflow
		}
		return s, nil
	case "*":
		hi, lo := bits.Mul64(uint64(absInt(a)), uint64(absInt(b)))
		if hi != 0 || lo > math.MaxInt64 {
			return nil, errOverflow
		}
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, fmt.Errorf("%w: division by zero", ErrValue)
		}
		return float64(a) / float64(b), nil
	case "//", "%":
		return intDivMod(op, a, b)
	}
	return intPow(a, b)
}

func absInt(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

func intDivMod(op string, a, b int64) (Value, error) {
	if b == 0 {
		return nil, fmt.Errorf("%w: integer division or modulo by zero", ErrValue)
	}
	if a == math.MinInt64 && b == -1 {
		return nil, errOverflow
	}
	q, m := a/b, a%b
	if m != 0 && (m < 0) != (b < 0) {
		q--
		m += b
	}
	if op == "//" {
		return q, nil
	}
	return m, nil
}

func intPow(a, b int64) (Value, error) {
	if b < 0 {
		if a == 0 {
			return nil, fmt.Errorf("%w: 0.0 cannot be raised to a negative power", ErrValue)
		}
		return math.Pow(float64(a), float64(b)), nil
	}
	if a == -1 {
		return int64(1 - 2*(b&1)), nil
	}
	result := int64(1)
	for range b {
		v, err := intOp("*", result, a)
		if err != nil {
			return nil, err
		}
		result = v.(int64)
		if result == 0 || result == 1 && a == 1 {
			break
		}
	}
	return result, nil
}

func floatOp(op string, a, b float64) (Value, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, fmt.Errorf("%w: float division by zero", ErrValue)
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, fmt.Errorf("%w: float floor division by zero", ErrValue)
		}
		return floorDiv(a, b), nil
	case "%":
		if b == 0 {
			return nil, fmt.Errorf("%w: float modulo", ErrValue)
		}
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	}
	if a == 0 && b < 0 {
		return nil, fmt.Errorf("%w: 0.0 cannot be raised to a negative power", ErrValue)
	}
	return math.Pow(a, b), nil
}

func add(r *renderer, l, rv Value) (Value, error) {
	switch x := l.(type) {
	case string:
		y, ok := rv.(string)
		if !ok {
			return nil, fmt.Errorf("%w: can only concatenate str (not \"%s\") to str", ErrType, typeName(rv))
		}
		if err := r.checkLen(len(x) + len(y)); err != nil {
			return nil, err
		}
		return x + y, nil
	case *List:
		y, ok := rv.(*List)
		if !ok || y.Tuple != x.Tuple {
			return nil, fmt.Errorf("%w: can only concatenate %s (not \"%s\") to %s", ErrType, typeName(l), typeName(rv), typeName(l))
		}
		if err := r.checkLen(len(x.Items) + len(y.Items)); err != nil {
			return nil, err
		}
		items := append(append(make([]Value, 0, len(x.Items)+len(y.Items)), x.Items...), y.Items...)
		return &List{Items: items, Tuple: x.Tuple}, nil
	}
	return nil, unsupported("+", l, rv)
}

func repeat(r *renderer, l, rv Value) (Value, error) {
	n, ok := integer(rv)
	seq := l
	if !ok {
		n, ok = integer(l)
		seq = rv
	}
	if !ok {
		return nil, fmt.Errorf("%w: can't multiply sequence by non-int of type '%s'", ErrType, typeName(rv))
	}
	n = max(n, 0)
	switch x := seq.(type) {
	case string:
		if err := r.checkLen(int(min(n, math.MaxInt32)) * len(x)); err != nil {
			return nil, err
		}
		return strings.Repeat(x, int(n)), nil
	case *List:
		if len(x.Items) == 0 {
			return &List{Tuple: x.Tuple}, nil
		}
		if err := r.checkLen(int(min(n, math.MaxInt32)) * len(x.Items)); err != nil {
			return nil, err
		}
		items := make([]Value, 0, int(n)*len(x.Items))
		for range n {
			items = append(items, x.Items...)
		}
		return &List{Items: items, Tuple: x.Tuple}, nil
	}
	return nil, unsupported("*", l, rv)
}

// floorDiv is Python's float //: computed from fmod so that 2 // 0.1 is
// 19.0, as in CPython.
func floorDiv(a, b float64) float64 {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 && (b < 0) != (mod < 0) {
		div--
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	fl := math.Floor(div)
	if div-fl > 0.5 {
		fl++
	}
	return fl
}
