package tokenizer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAppendEncodeStable checks AppendEncodeStable's promise on every
// parity model: for random prompts cut at a random limit and continued
// with random text, the first stable ids of the original equal the first
// stable ids of every continuation's full encoding; stable never exceeds
// the ids; and stable reaches past the first added token often enough to be worth having.
func TestAppendEncodeStable(t *testing.T) {
	texts := 400
	if testing.Short() || raceEnabled {
		texts = 100
	}
	for _, m := range prefixModels(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(len(m.name)), 31))
			useful := 0
			for i := range texts {
				special := i%2 == 1
				text := chatText(r, m.added, 1+r.IntN(5))
				if i%3 == 0 {
					text = randomText(r, m.added, 50+r.IntN(800))
				}
				limit := r.IntN(len(text) + 1)
				for limit < len(text) && !isBoundary(text, limit) {
					limit++
				}
				ids, stable, err := m.tok.AppendEncodeStable([]uint32{7}, text, special, limit)
				if err != nil {
					t.Fatal(err)
				}
				ids = ids[1:]
				if stable < 0 || stable > len(ids) {
					t.Fatalf("%q limit %d: stable %d of %d ids", text, limit, stable, len(ids))
				}
				if stable > 1 {
					useful++
				}
				for range 3 {
					other := text[:limit] + randomText(r, m.all, r.IntN(200))
					full, err := m.tok.Encode(other, special)
					if err != nil {
						t.Fatal(err)
					}
					if len(full) < stable || !slices.Equal(full[:stable], ids[:stable]) {
						t.Fatalf("%q cut at %d and continued as %q: first %d ids %v, the continuation's %v", text, limit, other, stable, ids[:stable], full[:min(stable, len(full))])
					}
				}
			}
			if useful < texts/4 {
				t.Errorf("stable covered more than one id for only %d of %d texts", useful, texts)
			}
		})
	}
}

// isBoundary reports whether i is the start of a rune of s.
func isBoundary(s string, i int) bool { return i == 0 || i == len(s) || s[i]&0xC0 != 0x80 }
