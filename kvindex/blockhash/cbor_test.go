package blockhash

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// TestCBORMatchesFxamacker checks that the hand-written CBOR encoder produces
// the same bytes as fxamacker/cbor's canonical and core deterministic modes
// (which agree with each other, and with Python's cbor2 canonical=True, for
// arrays, unsigned ints, byte and text strings and null).
func TestCBORMatchesFxamacker(t *testing.T) {
	modes := map[string]cbor.EncOptions{"canonical": cbor.CanonicalEncOptions(), "core deterministic": cbor.CoreDetEncOptions()}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, opts := range modes {
		em, err := opts.EncMode()
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			c := randomCase(rng, i)
			parent := randomDigest(rng, i%3 == 0)
			tokens := c.Tokens[:min(len(c.Tokens), c.BlockSize)]
			salt := ""
			if rng.IntN(2) == 0 {
				salt = c.Salt
			}
			var extra any
			switch {
			case c.LoRA != "" && salt != "":
				extra = []string{c.LoRA, salt}
			case c.LoRA != "":
				extra = []string{c.LoRA}
			case salt != "":
				extra = []string{salt}
			}
			want, err := em.Marshal([]any{parent, tokens, extra})
			if err != nil {
				t.Fatal(err)
			}
			if got := appendCBORBlock(nil, parent, tokens, c.LoRA, salt); !bytes.Equal(got, want) {
				t.Fatalf("appendCBORBlock(%v, %q, %q) = %x, want (%s) %x", tokens, c.LoRA, salt, got, name, want)
			}
			want, err = em.Marshal(c.Seed)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendCBORText(nil, c.Seed); !bytes.Equal(got, want) {
				t.Fatalf("appendCBORText(%q) = %x, want (%s) %x", c.Seed, got, name, want)
			}
		}
	}
}

// randomDigest returns the bytes of a random digest: 16 (xxh3_128) when
// short, else 32 (SHA-256).
func randomDigest(rng *rand.Rand, short bool) []byte {
	b := make([]byte, SHA256Size)
	if short {
		b = b[:XXH128Size]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestPickleSmallMatchesFramed checks the straight-line pickle encoder of
// ordinary blocks against the general one that tracks frames (both are also
// compared with Python in TestHashesMatchPython).
func TestPickleSmallMatchesFramed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		c := randomCase(rng, i)
		parent := randomDigest(rng, i%3 == 0)
		small := appendPickleSmallBlock(nil, parent, c.Tokens, c.LoRA, c.Salt)
		if framed := appendPickleFramedBlock(nil, parent, c.Tokens, c.LoRA, c.Salt); !bytes.Equal(small, framed) {
			t.Fatalf("appendPickleSmallBlock(%v, %q, %q) = %x, want %x", c.Tokens, c.LoRA, c.Salt, small, framed)
		}
	}
}
