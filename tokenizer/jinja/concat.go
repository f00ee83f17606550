package jinja

import "strings"

// String concatenation builds each result once: a + b + c and a ~ b ~ c
// collect their string operands and join them in one allocation, and an
// output {{ a + b + c }} writes the operands straight to the output. The
// operands are evaluated, checked and failed exactly as jinja2's left fold
// ((a + b) + c) does.

func (a *addExpr) eval(r *renderer, s *scope) (Value, error) {
	var buf [8]string
	strs, n, v, err := a.pieces(r, s, buf[:0])
	if err != nil || strs == nil {
		return v, err
	}
	return join(strs, n), nil
}

// pieces evaluates a + b + ... left to right. While the operands are
// strings it appends them to buf and returns them with their total length;
// otherwise (strs nil) it returns the value of the ordinary fold.
func (a *addExpr) pieces(r *renderer, s *scope, buf []string) (strs []string, n int, v Value, err error) {
	first, err := a.parts[0].eval(r, s)
	if err != nil {
		return nil, 0, nil, err
	}
	x, ok := first.(string)
	if !ok {
		v, err = a.fold(r, s, first, 1)
		return nil, 0, v, err
	}
	strs, n = buf, len(x)
	strs = append(strs, x)
	for i, p := range a.parts[1:] {
		v, err := p.eval(r, s)
		if err != nil {
			return nil, 0, nil, err
		}
		y, ok := v.(string)
		if !ok {
			// The fold so far is the joined strings; binaryOp fails a
			// string plus anything else as jinja2 does.
			v, err = binaryOp(r, "+", join(strs, n), v)
			if err == nil {
				v, err = a.fold(r, s, v, i+2)
			}
			return nil, 0, v, err
		}
		n += len(y)
		if err := r.checkLen(n); err != nil { // as add checks each step
			return nil, 0, nil, err
		}
		strs = append(strs, y)
	}
	return strs, n, nil, nil
}

// fold adds the parts from index from to acc one at a time.
func (a *addExpr) fold(r *renderer, s *scope, acc Value, from int) (Value, error) {
	for _, p := range a.parts[from:] {
		v, err := p.eval(r, s)
		if err != nil {
			return nil, err
		}
		if acc, err = binaryOp(r, "+", acc, v); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

func (c *concatExpr) eval(r *renderer, s *scope) (Value, error) {
	var buf [8]string
	strs, n, err := c.pieces(r, s, buf[:0])
	if err != nil {
		return nil, err
	}
	return join(strs, n), nil
}

// pieces evaluates a ~ b ~ ... left to right, appending the string of each
// operand to buf; n is their total length.
func (c *concatExpr) pieces(r *renderer, s *scope, buf []string) (strs []string, n int, err error) {
	strs = buf
	for _, p := range c.parts {
		v, err := p.eval(r, s)
		if err != nil {
			return nil, 0, err
		}
		x := str(v)
		n += len(x)
		if err := r.checkLen(n); err != nil {
			return nil, 0, err
		}
		strs = append(strs, x)
	}
	return strs, n, nil
}

// join concatenates strs, n bytes in all, allocating at most once.
func join(strs []string, n int) string {
	var only string
	for _, x := range strs {
		switch {
		case x == "":
		case len(x) == n:
			only = x // the one non-empty string
		default:
			var b strings.Builder
			b.Grow(n)
			for _, x := range strs {
				b.WriteString(x)
			}
			return b.String()
		}
	}
	return only
}
