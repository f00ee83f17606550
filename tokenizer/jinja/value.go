package jinja

import (
	"fmt"
	"math"
	"strings"
)

// Value is a template value: nil (None), bool, int64, float64, string,
// *List, *Dict, *Namespace, Undefined or a callable.
type Value = any

// Undefined is a missing variable, attribute or item, as jinja2's default
// Undefined: it prints as "", is false, iterates as empty, and fails on any
// other use.
type Undefined struct {
	// Name says what was missing, for error messages.
	Name string
	// unsafe is set when the attribute was refused by the sandbox.
	unsafe string
	// owner and attr name a missing attribute of an owner type; the message
	// is formatted only when an error needs it (templates probe many).
	owner, attr string
}

func (u Undefined) err() error {
	if u.unsafe != "" {
		return fmt.Errorf("%w: %s", ErrSecurity, u.unsafe)
	}
	name := u.Name
	if u.attr != "" {
		name = fmt.Sprintf("'%s' object has no attribute '%s'", u.owner, u.attr)
	}
	return fmt.Errorf("%w: %s is undefined", ErrUndefined, name)
}

// List is a Python list (or, with Tuple set, a tuple; with Gen set, the
// generator some filters return: always true, no length, no indexing).
type List struct {
	Items []Value
	Tuple bool
	Gen   bool
	// View names a dict view ("dict_keys", ...), printed as Python does.
	View string
	// Repr, when set, is how the list prints (a range object).
	Repr string
}

// NewList returns a list of the items.
func NewList(items ...Value) *List { return &List{Items: items} }

// Dict is a Python dict: keys keep their insertion order.
type Dict struct {
	keys []Value
	vals []Value
	// index maps hashKey of each key to its position once the dict has
	// more than smallDict keys; smaller dicts are scanned.
	index map[Value]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{} }

// hashKey maps a key to its Go map key as Python hashes it: True == 1 ==
// 1.0. It reports false for unhashable keys.
func hashKey(k Value) (Value, bool) {
	switch v := k.(type) {
	case bool:
		if v {
			return int64(1), true
		}
		return int64(0), true
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<62 {
			return int64(v), true
		}
		return v, true
	case nil, int64, string:
		return v, true
	case *List:
		if v.Tuple {
			return fmt.Sprintf("\x00tuple%s", repr(v)), true
		}
	}
	return nil, false
}

// Set stores v under k, keeping k's position when it is already present.
func (d *Dict) Set(k, v Value) error {
	h, ok := hashKey(k)
	if !ok {
		return fmt.Errorf("%w: unhashable type: '%s'", ErrType, typeName(k))
	}
	if i, ok := d.find(h); ok {
		d.vals[i] = v
		return nil
	}
	if d.keys == nil {
		d.keys, d.vals = make([]Value, 0, 4), make([]Value, 0, 4)
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	switch {
	case d.index != nil:
		d.index[h] = len(d.keys) - 1
	case len(d.keys) > smallDict:
		d.index = make(map[Value]int, 2*len(d.keys))
		for i, key := range d.keys {
			kh, _ := hashKey(key)
			d.index[kh] = i
		}
	}
	return nil
}

// find returns the position of the key whose hashKey is h.
func (d *Dict) find(h Value) (int, bool) {
	if d.index != nil {
		i, ok := d.index[h]
		return i, ok
	}
	hs, _ := h.(string)
	for i, key := range d.keys {
		if _, tuple := key.(*List); tuple && !strings.HasPrefix(hs, "\x00tuple") {
			continue // a tuple key hashes to "\x00tuple" and its repr
		}
		if kh, _ := hashKey(key); kh == h {
			return i, true
		}
	}
	return 0, false
}

// SetString stores v under the string key k.
func (d *Dict) SetString(k string, v Value) { _ = d.Set(k, v) }

// smallDict is the size up to which Get finds string keys by scanning
// rather than hashing (JSON objects in templates are mostly this small).
const smallDict = 8

// Get returns the value under k.
func (d *Dict) Get(k Value) (Value, bool) {
	if ks, ok := k.(string); ok && len(d.keys) <= smallDict {
		// A string equals only a string key.
		for i, key := range d.keys {
			if s, ok := key.(string); ok && s == ks {
				return d.vals[i], true
			}
		}
		return nil, false
	}
	h, ok := hashKey(k)
	if !ok {
		return nil, false
	}
	i, ok := d.find(h)
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len returns the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order; the caller must not modify it.
func (d *Dict) Keys() []Value { return d.keys }

// Values returns the values in key order; the caller must not modify it.
func (d *Dict) Values() []Value { return d.vals }

// Namespace is the object namespace() returns: attributes that set can
// change from inside loops.
type Namespace struct{ attrs *Dict }

// truthy is Python's bool().
func truthy(v Value) bool {
	switch x := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *List:
		return x.Gen || len(x.Items) > 0
	case *Dict:
		return x.Len() > 0
	}
	return true
}

// typeName is Python's type(v).__name__.
func typeName(v Value) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case Undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		switch {
		case x.Tuple:
			return "tuple"
		case x.Gen:
			return "generator"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *loopState:
		return "LoopContext"
	case *macro:
		return "Macro"
	}
	return "function"
}

// number returns v as a float and whether v is a number (bool counts, as in
// Python).
func number(v Value) (float64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// integer returns v as an int and whether v is an int or bool.
func integer(v Value) (int64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case int64:
		return x, true
	}
	return 0, false
}
