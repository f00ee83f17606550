package jsonlex

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzUint32s: Uint32s reads exactly the arrays encoding/json reads into a
// []uint32 (no nulls), and the same values.
func FuzzUint32s(f *testing.F) {
	for _, s := range []string{`[]`, `[0, 1 ,4294967295]`, "[\n7\t]", `[1,]`, `[01]`, `[1.0]`, `[-1]`, `[4294967296]`, `[1e3]`, `[1 2]`, `[`, `["1"]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l := New([]byte(s), Options{})
		got, err := l.Uint32s([]uint32{5})
		if err == nil {
			err = l.End()
		}
		var want []uint32
		werr := json.Unmarshal([]byte(s), &want)
		if werr == nil && (len(s) == 0 || s[0] != '[' || slices.Contains([]byte(s), 'n')) {
			return // null elements, or a value encoding/json reads into a slice otherwise
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("Uint32s(%q) = %v, %v; encoding/json: %v, %v", s, got, err, want, werr)
		}
		if err == nil && !slices.Equal(got[1:], want) {
			t.Fatalf("Uint32s(%q) = %v, want %v", s, got[1:], want)
		}
	})
}
