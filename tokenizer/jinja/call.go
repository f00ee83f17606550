package jinja

import (
	"fmt"
	"slices"
	"strings"
)

// callable is anything a template can call.
type callable interface {
	call(r *renderer, args []Value, kw kwargs) (Value, error)
}

// kwargs are keyword arguments in call order.
type kwargs struct {
	names []string
	vals  []Value
}

func (k kwargs) get(name string) (Value, bool) {
	for i, n := range k.names {
		if n == name {
			return k.vals[i], true
		}
	}
	return nil, false
}

// builtin is a global function.
type builtin func(r *renderer, args []Value, kw kwargs) (Value, error)

func (b builtin) call(r *renderer, args []Value, kw kwargs) (Value, error) { return b(r, args, kw) }

// macro is a macro bound to the scope it was defined in.
type macro struct {
	def     *macroDef
	closure *scope
}

// enterCall counts a macro call as an iteration too, so that a macro
// calling itself twice per level stays bounded.
func (r *renderer) enterCall() error {
	if err := r.iterate(); err != nil {
		return err
	}
	r.callDepth++
	if r.callDepth > r.limits.MaxCallDepth {
		return fmt.Errorf("%w: maximum recursion depth %d exceeded", ErrLimit, r.limits.MaxCallDepth)
	}
	return nil
}

func (r *renderer) leaveCall() { r.callDepth-- }

func (m *macro) call(r *renderer, args []Value, kw kwargs) (Value, error) {
	d := m.def
	if len(args) > len(d.params) {
		return nil, fmt.Errorf("%w: macro '%s' takes not more than %d argument(s)", ErrType, d.name, len(d.params))
	}
	if err := r.enterCall(); err != nil {
		return nil, err
	}
	defer r.leaveCall()
	s := m.closure.child()
	for i, v := range args {
		s.vars[d.params[i]] = v
	}
	if err := m.bindRest(r, s, len(args), kw); err != nil {
		return nil, err
	}
	return r.capture(d.body, s)
}

// bindRest binds the parameters after the positional ones from keywords or
// defaults.
func (m *macro) bindRest(r *renderer, s *scope, from int, kw kwargs) error {
	d := m.def
	for i, n := range kw.names {
		switch {
		case n == "caller":
			s.vars["caller"] = kw.vals[i]
		case !slices.Contains(d.params, n):
			return fmt.Errorf("%w: macro '%s' takes no keyword argument '%s'", ErrType, d.name, n)
		}
	}
	firstDefault := len(d.params) - len(d.defaults)
	for i := from; i < len(d.params); i++ {
		if v, ok := kw.get(d.params[i]); ok {
			s.vars[d.params[i]] = v
			continue
		}
		if i < firstDefault {
			s.vars[d.params[i]] = Undefined{Name: fmt.Sprintf("parameter '%s'", d.params[i])}
			continue
		}
		v, err := d.defaults[i-firstDefault].eval(r, s)
		if err != nil {
			return err
		}
		s.vars[d.params[i]] = v
	}
	return nil
}

func (c *callExpr) eval(r *renderer, s *scope) (Value, error) { return c.evalWith(r, s, nil) }

// evalWith calls with an extra caller keyword (a call block) when caller is
// not nil.
func (c *callExpr) evalWith(r *renderer, s *scope, caller *macro) (Value, error) {
	var fn Value
	var err error
	if a, ok := c.fn.(*attrExpr); ok && caller == nil {
		if fn, err = a.obj.eval(r, s); err != nil {
			return nil, err
		}
		if x, ok := fn.(string); ok && !strings.HasPrefix(a.name, "_") && stringMethods[a.name] != nil {
			// x.method(...): a string method is called without binding it.
			args, kw, err := c.args.eval(r, s)
			if err != nil {
				return nil, err
			}
			return stringMethods[a.name](r, x, args, kw)
		}
		fn, err = getattr(fn, a.name)
	} else {
		fn, err = c.fn.eval(r, s)
	}
	if err != nil {
		return nil, err
	}
	args, kw, err := c.args.eval(r, s)
	if err != nil {
		return nil, err
	}
	if caller != nil {
		kw.names, kw.vals = append(slices.Clone(kw.names), "caller"), append(kw.vals, caller)
	}
	return callValue(r, fn, args, kw)
}

func callValue(r *renderer, fn Value, args []Value, kw kwargs) (Value, error) {
	switch f := fn.(type) {
	case callable:
		return f.call(r, args, kw)
	case Undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("%w: '%s' object is not callable", ErrType, typeName(fn))
}

func (a *callArgs) eval(r *renderer, s *scope) ([]Value, kwargs, error) {
	var args []Value
	if len(a.pos) > 0 {
		args = make([]Value, len(a.pos))
	}
	for i, e := range a.pos {
		v, err := e.eval(r, s)
		if err != nil {
			return nil, kwargs{}, err
		}
		args[i] = v
	}
	kw := kwargs{names: a.kwNames}
	for _, e := range a.kwVals {
		v, err := e.eval(r, s)
		if err != nil {
			return nil, kwargs{}, err
		}
		kw.vals = append(kw.vals, v)
	}
	return args, kw, nil
}
