package jinja

import "fmt"

// dictMethod calls a safe dict method.
func dictMethod(d *Dict, name string, args []Value) (Value, error) {
	switch name {
	case "items":
		items := make([]Value, d.Len())
		for i, k := range d.keys {
			items[i] = &List{Items: []Value{k, d.vals[i]}, Tuple: true}
		}
		return &List{Items: items, View: "dict_items"}, nil
	case "keys":
		return &List{Items: append([]Value(nil), d.keys...), View: "dict_keys"}, nil
	case "values":
		return &List{Items: append([]Value(nil), d.vals...), View: "dict_values"}, nil
	case "copy":
		c := NewDict()
		for i, k := range d.keys {
			_ = c.Set(k, d.vals[i])
		}
		return c, nil
	}
	if len(args) < 1 || len(args) > 2 {
		return nil, argErr("get", "1 or 2 arguments")
	}
	if _, ok := hashKey(args[0]); !ok {
		return nil, fmt.Errorf("%w: unhashable type: '%s'", ErrType, typeName(args[0]))
	}
	if v, ok := d.Get(args[0]); ok {
		return v, nil
	}
	if len(args) == 2 {
		return args[1], nil
	}
	return nil, nil
}

func listMethod(l *List, name string, args []Value) (Value, error) {
	if name == "copy" {
		return &List{Items: append([]Value(nil), l.Items...)}, nil
	}
	if len(args) != 1 {
		return nil, argErr(name, "exactly one argument")
	}
	n := int64(0)
	for i, it := range l.Items {
		if equal(it, args[0]) {
			if name == "index" {
				return int64(i), nil
			}
			n++
		}
	}
	if name == "index" {
		return nil, fmt.Errorf("%w: %s is not in list", ErrValue, repr(args[0]))
	}
	return n, nil
}
