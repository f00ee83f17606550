package jinja

import (
	"fmt"
)

// globalScope holds the functions every template sees: jinja2's defaults
// plus transformers' raise_exception and strftime_now.
var globalScope = &scope{vars: map[string]Value{
	"range":           builtin(rangeFunc),
	"namespace":       builtin(namespaceFunc),
	"dict":            builtin(dictFunc),
	"raise_exception": builtin(raiseException),
	"strftime_now":    builtin(strftimeNow),
}}

func rangeFunc(r *renderer, args []Value, _ kwargs) (Value, error) {
	var n [3]int64
	n[2] = 1
	for i, a := range args {
		v, ok := integer(a)
		if !ok || i > 2 {
			return nil, fmt.Errorf("%w: range() takes 1 to 3 integers", ErrType)
		}
		n[i] = v
	}
	switch len(args) {
	case 0:
		return nil, fmt.Errorf("%w: range expected at least 1 argument, got 0", ErrType)
	case 1:
		n[0], n[1] = 0, n[0]
	}
	start, stop, step := n[0], n[1], n[2]
	if step == 0 {
		return nil, fmt.Errorf("%w: range() arg 3 must not be zero", ErrValue)
	}
	var items []Value
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		if err := r.iterate(); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	text := fmt.Sprintf("range(%d, %d)", start, stop)
	if step != 1 {
		text = fmt.Sprintf("range(%d, %d, %d)", start, stop, step)
	}
	return &List{Items: items, Repr: text}, nil
}

func namespaceFunc(_ *renderer, args []Value, kw kwargs) (Value, error) {
	ns := &Namespace{attrs: NewDict()}
	for _, a := range args {
		d, ok := a.(*Dict)
		if !ok {
			return nil, fmt.Errorf("%w: namespace() takes a mapping", ErrType)
		}
		for i, k := range d.keys {
			_ = ns.attrs.Set(k, d.vals[i])
		}
	}
	for i, n := range kw.names {
		ns.attrs.SetString(n, kw.vals[i])
	}
	return ns, nil
}

func dictFunc(_ *renderer, args []Value, kw kwargs) (Value, error) {
	d := NewDict()
	if len(args) > 0 {
		src, ok := args[0].(*Dict)
		if !ok {
			return nil, fmt.Errorf("%w: dict() takes a mapping", ErrType)
		}
		for i, k := range src.keys {
			_ = d.Set(k, src.vals[i])
		}
	}
	for i, n := range kw.names {
		d.SetString(n, kw.vals[i])
	}
	return d, nil
}

func raiseException(_ *renderer, args []Value, _ kwargs) (Value, error) {
	msg := ""
	if len(args) > 0 {
		msg = str(args[0])
	}
	return nil, fmt.Errorf("%w: %s", ErrRaised, msg)
}

func strftimeNow(r *renderer, args []Value, _ kwargs) (Value, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("%w: strftime_now takes one argument", ErrType)
	}
	f, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("%w: strftime() argument 1 must be str, not %s", ErrType, typeName(args[0]))
	}
	return strftime(r.now(), f), nil
}
