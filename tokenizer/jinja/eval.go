package jinja

import (
	"errors"
	"fmt"
)

func (c *constExpr) eval(*renderer, *scope) (Value, error) { return c.v, nil }

func (n *nameExpr) eval(_ *renderer, s *scope) (Value, error) {
	if v, ok := s.lookup(n.name); ok {
		return v, nil
	}
	return n.undef, nil
}

func (l *listExpr) eval(r *renderer, s *scope) (Value, error) {
	items := make([]Value, len(l.items))
	for i, e := range l.items {
		v, err := e.eval(r, s)
		if err != nil {
			return nil, err
		}
		items[i] = v
	}
	return &List{Items: items, Tuple: l.tuple}, nil
}

func (d *dictExpr) eval(r *renderer, s *scope) (Value, error) {
	out := NewDict()
	for i, ke := range d.keys {
		k, err := ke.eval(r, s)
		if err != nil {
			return nil, err
		}
		v, err := d.vals[i].eval(r, s)
		if err != nil {
			return nil, err
		}
		if err := out.Set(k, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (a *attrExpr) eval(r *renderer, s *scope) (Value, error) {
	obj, err := a.obj.eval(r, s)
	if err != nil {
		return nil, err
	}
	return getattr(obj, a.name)
}

func (it *itemExpr) eval(r *renderer, s *scope) (Value, error) {
	obj, err := it.obj.eval(r, s)
	if err != nil {
		return nil, err
	}
	k, err := it.key.eval(r, s)
	if err != nil {
		return nil, err
	}
	return getitem(obj, k)
}

func (f *filterExpr) eval(r *renderer, s *scope) (Value, error) {
	v, err := f.arg.eval(r, s)
	if err != nil {
		return nil, err
	}
	return f.apply(r, s, v)
}

// apply runs the filter on v.
func (f *filterExpr) apply(r *renderer, s *scope, v Value) (Value, error) {
	args, kw, err := f.args.eval(r, s)
	if err != nil {
		return nil, err
	}
	out, err := filters[f.name](r, v, args, kw)
	if err != nil {
		return nil, fmt.Errorf("filter %s: %w", f.name, err)
	}
	return out, nil
}

func (t *testExpr) eval(r *renderer, s *scope) (Value, error) {
	v, err := t.arg.eval(r, s)
	if err != nil {
		return nil, err
	}
	args, _, err := t.args.eval(r, s)
	if err != nil {
		return nil, err
	}
	ok, err := tests[t.name](v, args)
	if err != nil {
		return nil, err
	}
	return ok != t.negate, nil
}

func (n *notExpr) eval(r *renderer, s *scope) (Value, error) {
	v, err := n.e.eval(r, s)
	if err != nil {
		return nil, err
	}
	return !truthy(v), nil
}

func (u *unaryExpr) eval(r *renderer, s *scope) (Value, error) {
	v, err := u.e.eval(r, s)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case Undefined:
		return nil, x.err()
	case bool, int64:
		n, _ := integer(x)
		if u.neg {
			return -n, nil
		}
		return n, nil
	case float64:
		if u.neg {
			return -x, nil
		}
		return x, nil
	}
	return nil, fmt.Errorf("%w: bad operand type for unary %s: '%s'", ErrType, map[bool]string{true: "-", false: "+"}[u.neg], typeName(v))
}

func (b *binExpr) eval(r *renderer, s *scope) (Value, error) {
	l, err := b.l.eval(r, s)
	if err != nil {
		return nil, err
	}
	rv, err := b.r.eval(r, s)
	if err != nil {
		return nil, err
	}
	return binaryOp(r, b.op, l, rv)
}

func (a *andExpr) eval(r *renderer, s *scope) (Value, error) {
	l, err := a.l.eval(r, s)
	if err != nil || !truthy(l) {
		return l, err
	}
	return a.r.eval(r, s)
}

func (o *orExpr) eval(r *renderer, s *scope) (Value, error) {
	l, err := o.l.eval(r, s)
	if err != nil || truthy(l) {
		return l, err
	}
	return o.r.eval(r, s)
}

func (c *condExpr) eval(r *renderer, s *scope) (Value, error) {
	v, err := c.cond.eval(r, s)
	if err != nil {
		return nil, err
	}
	if truthy(v) {
		return c.then.eval(r, s)
	}
	if c.els == nil {
		return Undefined{Name: "the inline if-expression"}, nil
	}
	return c.els.eval(r, s)
}

func (c *compareExpr) eval(r *renderer, s *scope) (Value, error) {
	l, err := c.first.eval(r, s)
	if err != nil {
		return nil, err
	}
	for i, op := range c.ops {
		rv, err := c.rest[i].eval(r, s)
		if err != nil {
			return nil, err
		}
		ok, err := compareOp(op, l, rv)
		if err != nil || !ok {
			return false, err
		}
		l = rv
	}
	return true, nil
}

func (sl *sliceExpr) eval(r *renderer, s *scope) (Value, error) {
	obj, err := sl.obj.eval(r, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]Value
	for i, e := range []expr{sl.lo, sl.hi, sl.step} {
		if e == nil {
			continue
		}
		if bounds[i], err = e.eval(r, s); err != nil {
			return nil, err
		}
	}
	if u, ok := obj.(Undefined); ok {
		return nil, u.err()
	}
	v, err := slice(obj, bounds)
	if err != nil && r.folding && errors.Is(err, ErrType) {
		// jinja2 folds constant slices through environment.getitem, which
		// turns the failure into an undefined value.
		return Undefined{Name: "slice"}, nil
	}
	return v, err
}
