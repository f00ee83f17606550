package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestStrTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 1000, 40000} {
		m := map[string]uint32{}
		if n > 0 {
			m[""] = 99 // the empty key is a key like any other
		}
		for len(m) < n {
			b := make([]byte, rng.IntN(12))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			m[string(b)] = rng.Uint32()
		}
		tab, ok := newStrTable(m)
		if !ok {
			t.Fatalf("n=%d: table not built", n)
		}
		if tab.len() != len(m) {
			t.Fatalf("n=%d: len = %d", n, tab.len())
		}
		for k, want := range m {
			if got, ok := tab.get(k); !ok || got != want {
				t.Fatalf("n=%d: get(%q) = %d, %v, want %d", n, k, got, ok, want)
			}
			for _, miss := range []string{k + "\x00", k + "x", "\xff" + k} {
				if _, in := m[miss]; in {
					continue
				}
				if got, ok := tab.get(miss); ok {
					t.Fatalf("n=%d: get(%q) = %d, want absent", n, miss, got)
				}
			}
		}
	}
}

func BenchmarkStrTableGet(b *testing.B) {
	m := map[string]uint32{}
	for i := range 150000 {
		m[fmt.Sprintf("tok%d", i)] = uint32(i)
	}
	tab, _ := newStrTable(m)
	keys := []string{"tok1", "tok77777", "tok149999", "missing"}
	b.ResetTimer()
	for i := range b.N {
		tab.get(keys[i%len(keys)])
	}
}
