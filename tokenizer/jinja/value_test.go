package jinja

import (
	"fmt"
	"math"
	"testing"
)

// TestDictKeys checks Python's key equality (True == 1 == 1.0, tuples by
// value) and insertion order in dicts small enough to scan and large
// enough to index.
func TestDictKeys(t *testing.T) {
	for _, size := range []int{0, smallDict - 4, smallDict, smallDict + 1, 3 * smallDict} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			d := NewDict()
			for i := range size {
				d.SetString(fmt.Sprintf("k%d", i), i)
			}
			tuple := &List{Items: []Value{int64(1), "a"}, Tuple: true}
			for _, kv := range [][2]Value{
				{true, "true"},
				{int64(1), "one"},
				{1.0, "one float"},
				{int64(0), "zero"},
				{false, "false"},
				{tuple, "tuple"},
				{&List{Items: []Value{int64(1), "a"}, Tuple: true}, "same tuple"},
				{nil, "none"},
				{2.5, "float"},
				{math.NaN(), "nan"},
				{math.NaN(), "nan2"},
			} {
				if err := d.Set(kv[0], kv[1]); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Set(NewList(), 1); err == nil {
				t.Errorf("Set(list) = nil, want an unhashable error")
			}
			if got, want := d.Len(), size+7; got != want {
				t.Errorf("Len() = %d, want %d", got, want)
			}
			for _, c := range []struct {
				k    Value
				want Value
			}{
				{int64(1), "one float"},
				{true, "one float"},
				{int64(0), "false"},
				{0.0, "false"},
				{&List{Items: []Value{int64(1), "a"}, Tuple: true}, "same tuple"},
				{"(1, 'a')", nil},
				{nil, "none"},
				{2.5, "float"},
				{"k0", 0},
				{fmt.Sprintf("k%d", size-1), size - 1},
			} {
				if k, ok := c.k.(string); ok && size == 0 && k != "(1, 'a')" {
					continue
				}
				if v, ok := d.Get(c.k); ok != (c.want != nil) || v != c.want {
					t.Errorf("Get(%v) = %v, %v; want %v", c.k, v, ok, c.want)
				}
			}
			if _, ok := d.Get(math.NaN()); ok {
				t.Errorf("Get(NaN) found a key")
			}
			if _, ok := d.Get(int64(7)); ok {
				t.Errorf("Get(7) found a key")
			}
			if k := d.Keys()[size]; k != true {
				t.Errorf("Keys()[%d] = %v, want true (the first of the equal keys)", size, k)
			}
		})
	}
}
