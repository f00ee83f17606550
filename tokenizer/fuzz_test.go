package tokenizer

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// FuzzEncode checks invariants on any input: no panic, ids in range, the
// same ids twice, and special tokens only around the plain encoding.
func FuzzEncode(f *testing.F) {
	for _, s := range handWritten {
		f.Add(s, uint8(0))
	}
	f.Add("\xff\xfe invalid \xc3", uint8(1))
	toks := make([]*Tokenizer, len(oracle.Models))
	for i, m := range oracle.Models {
		toks[i] = loadModel(f, m)
	}
	f.Fuzz(func(t *testing.T, s string, which uint8) {
		tok := toks[int(which)%len(toks)]
		a, err := tok.Encode(s, false)
		if err != nil {
			t.Fatalf("Encode(%q): %v", s, err)
		}
		b, err := tok.Encode(s, false)
		if err != nil || !slices.Equal(a, b) {
			t.Fatalf("Encode(%q) not deterministic: %v then %v (%v)", s, a, b, err)
		}
		for _, id := range a {
			if int(id) >= tok.VocabSize() {
				t.Fatalf("Encode(%q) = id %d, vocabulary size %d", s, id, tok.VocabSize())
			}
		}
		c, err := tok.Encode(s, true)
		if err != nil {
			t.Fatalf("Encode(%q, true): %v", s, err)
		}
		if _, _, ok := around(c, a); !ok {
			t.Fatalf("Encode(%q, true) = %v does not contain Encode(%q, false) = %v", s, c, s, a)
		}
	})
}
