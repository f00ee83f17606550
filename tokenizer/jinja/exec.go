package jinja

import (
	"errors"
	"fmt"
	"strings"
)

// errBreak and errContinue carry loop control out of a loop body.
var (
	errBreak    = errors.New("jinja: break")
	errContinue = errors.New("jinja: continue")
)

// errNotFolded marks an output not evaluated at compile time.
var errNotFolded = errors.New("jinja: not folded")

func (r *renderer) execBody(body []stmt, s *scope) error {
	for _, st := range body {
		if err := st.exec(r, s); err != nil {
			return err
		}
	}
	return nil
}

func (t *textStmt) exec(r *renderer, _ *scope) error { return r.write(t.text) }

func (p *printStmt) exec(r *renderer, s *scope) error {
	if !p.folded {
		var buf [8]string
		var strs []string
		var n int
		var v Value
		var err error
		switch e := p.e.(type) {
		case *addExpr:
			strs, n, v, err = e.pieces(r, s, buf[:0])
		case *concatExpr:
			strs, n, err = e.pieces(r, s, buf[:0])
		default:
			return p.print(r, s)
		}
		if err != nil || strs == nil {
			return r.printValue(v, err)
		}
		return r.writePieces(strs, n)
	}
	return p.print(r, s)
}

// print evaluates the output expression and writes its value.
func (p *printStmt) print(r *renderer, s *scope) error {
	var v Value
	err := errNotFolded
	if p.folded {
		// jinja2 evaluates a constant output at compile time, where a
		// failed slice is undefined; if that fails it evaluates at render
		// time, where the slice raises.
		r.folding = true
		v, err = p.e.eval(r, s)
		r.folding = false
	}
	if err != nil {
		v, err = p.e.eval(r, s)
	}
	return r.printValue(v, err)
}

// printValue writes the value of an output expression (unless its
// evaluation failed with err).
func (r *renderer) printValue(v Value, err error) error {
	if err != nil {
		return err
	}
	if x, ok := v.(string); ok {
		return r.write(x)
	}
	return r.write(strMax(v, r.limits.MaxOutput))
}

func (st *ifStmt) exec(r *renderer, s *scope) error {
	for i, c := range st.conds {
		v, err := c.eval(r, s)
		if err != nil {
			return err
		}
		if truthy(v) {
			return r.execBody(st.bodies[i], s)
		}
	}
	return r.execBody(st.els, s)
}

func (*breakStmt) exec(*renderer, *scope) error    { return errBreak }
func (*continueStmt) exec(*renderer, *scope) error { return errContinue }

func (st *setStmt) exec(r *renderer, s *scope) error {
	v, err := st.value.eval(r, s)
	if err != nil {
		return err
	}
	return assign(s, st.target, v)
}

// assign binds v to a set or for target in s.
func assign(s *scope, t target, v Value) error {
	switch {
	case t.attr != "":
		obj, _ := s.lookup(t.name)
		ns, ok := obj.(*Namespace)
		if !ok {
			return fmt.Errorf("%w: cannot assign attribute on non-namespace object", ErrType)
		}
		ns.attrs.SetString(t.attr, v)
	case t.names != nil:
		items, err := iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.names) {
			return fmt.Errorf("%w: cannot unpack %d values into %d names", ErrValue, len(items), len(t.names))
		}
		for i, n := range t.names {
			s.vars[n] = items[i]
		}
	default:
		s.vars[t.name] = v
	}
	return nil
}

func (st *setBlockStmt) exec(r *renderer, s *scope) error {
	v, err := r.capture(st.body, s)
	if err != nil {
		return err
	}
	var out Value = v
	for _, f := range st.filters {
		if out, err = f.apply(r, s, out); err != nil {
			return err
		}
	}
	return assign(s, st.target, out)
}

// capture renders body into a string instead of the output.
func (r *renderer) capture(body []stmt, s *scope) (string, error) {
	return r.captureFunc(func() error { return r.execBody(body, s) })
}

// captureFunc runs fn with the output going to a new string; the output
// limit counts both.
func (r *renderer) captureFunc(fn func() error) (string, error) {
	saved := r.out
	r.base += saved.Len()
	r.out = &strings.Builder{}
	err := fn()
	got := r.out.String()
	r.out = saved
	r.base -= saved.Len()
	return got, err
}

func (st *filterBlockStmt) exec(r *renderer, s *scope) error {
	v, err := r.capture(st.body, s)
	if err != nil {
		return err
	}
	var out Value = v
	for _, f := range st.filters {
		if out, err = f.apply(r, s, out); err != nil {
			return err
		}
	}
	return r.write(str(out))
}

func (st *withStmt) exec(r *renderer, s *scope) error {
	inner := s.child()
	for i, t := range st.targets {
		v, err := st.values[i].eval(r, s)
		if err != nil {
			return err
		}
		if err := assign(inner, t, v); err != nil {
			return err
		}
	}
	return r.execBody(st.body, inner)
}

func (st *macroStmt) exec(_ *renderer, s *scope) error {
	s.vars[st.def.name] = &macro{def: st.def, closure: s}
	return nil
}

func (st *callStmt) exec(r *renderer, s *scope) error {
	caller := &macro{def: st.caller, closure: s}
	v, err := st.call.evalWith(r, s, caller)
	if err != nil {
		return err
	}
	return r.write(str(v))
}
