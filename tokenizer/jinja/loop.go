package jinja

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// loopState is the loop variable of a for loop.
type loopState struct {
	items   []Value
	i       int
	depth   int
	st      *forStmt
	outer   *scope
	changed []Value
	hasLast bool
}

// iterate returns the items a for loop visits in v.
func iterate(v Value) ([]Value, error) {
	switch x := v.(type) {
	case *List:
		return x.Items, nil
	case *Dict:
		return x.keys, nil
	case string:
		out := make([]Value, 0, utf8.RuneCountInString(x))
		for _, c := range x {
			out = append(out, string(c))
		}
		return out, nil
	case Undefined:
		if x.unsafe != "" {
			return nil, x.err()
		}
		return nil, nil
	case *Namespace, *loopState:
		return nil, fmt.Errorf("%w: '%s' object is not iterable", ErrType, typeName(v))
	}
	return nil, fmt.Errorf("%w: '%s' object is not iterable", ErrType, typeName(v))
}

func (st *forStmt) exec(r *renderer, s *scope) error {
	v, err := st.iter.eval(r, s)
	if err != nil {
		return err
	}
	return st.run(r, s, v, 1)
}

func (st *forStmt) run(r *renderer, s *scope, v Value, depth int) error {
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if st.cond != nil {
		if items, err = st.filter(r, s, items); err != nil {
			return err
		}
	}
	loop := &loopState{items: items, depth: depth, st: st, outer: s}
	completed := false // jinja2 runs else unless an iteration ran to its end
	var inner *scope
	for i, it := range items {
		if err := r.iterate(); err != nil {
			return err
		}
		loop.i = i
		if inner == nil || st.closes {
			inner = s.child()
		} else {
			clear(inner.vars) // nothing outlives an iteration
		}
		if err := assign(inner, st.target, it); err != nil {
			return err
		}
		inner.vars["loop"] = loop
		err := r.execBody(st.body, inner)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return err
		}
		completed = completed || err == nil
	}
	if !completed {
		return r.execBody(st.els, s)
	}
	return nil
}

func (st *forStmt) filter(r *renderer, s *scope, items []Value) ([]Value, error) {
	var kept []Value
	inner := s.child() // an expression keeps no scope: one for all items
	for _, it := range items {
		if err := r.iterate(); err != nil {
			return nil, err
		}
		clear(inner.vars)
		if err := assign(inner, st.target, it); err != nil {
			return nil, err
		}
		ok, err := st.cond.eval(r, inner)
		if err != nil {
			return nil, err
		}
		if truthy(ok) {
			kept = append(kept, it)
		}
	}
	return kept, nil
}

// attr returns a loop attribute.
func (l *loopState) attr(name string) (Value, bool) {
	n := int64(len(l.items))
	i := int64(l.i)
	switch name {
	case "index":
		return i + 1, true
	case "index0":
		return i, true
	case "revindex":
		return n - i, true
	case "revindex0":
		return n - i - 1, true
	case "first":
		return i == 0, true
	case "last":
		return i == n-1, true
	case "length":
		return n, true
	case "depth":
		return int64(l.depth), true
	case "depth0":
		return int64(l.depth - 1), true
	case "previtem":
		if i == 0 {
			return Undefined{Name: "there is no previous item"}, true
		}
		return l.items[i-1], true
	case "nextitem":
		if i == n-1 {
			return Undefined{Name: "there is no next item"}, true
		}
		return l.items[i+1], true
	case "cycle", "changed":
		return &method{recv: l, name: name}, true
	}
	return nil, false
}

// call is loop(items) inside a recursive loop.
func (l *loopState) call(r *renderer, args []Value, _ kwargs) (Value, error) {
	if !l.st.recursive {
		return nil, fmt.Errorf("%w: the loop must have the 'recursive' marker to be called", ErrType)
	}
	if len(args) != 1 {
		return nil, fmt.Errorf("%w: loop() takes exactly one argument", ErrType)
	}
	if err := r.enterCall(); err != nil {
		return nil, err
	}
	defer r.leaveCall()
	return r.captureFunc(func() error { return l.st.run(r, l.outer, args[0], l.depth+1) })
}

func (l *loopState) cycle(args []Value) (Value, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("%w: no items for cycling given", ErrType)
	}
	return args[l.i%len(args)], nil
}

func (l *loopState) changedCall(args []Value) (Value, error) {
	v := NewList(args...)
	if l.hasLast && equal(v, NewList(l.changed...)) {
		return false, nil
	}
	l.changed, l.hasLast = args, true
	return true, nil
}
