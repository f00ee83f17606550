package blockhash

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// checkChain checks that every way of hashing tokens agrees with
// AppendHashes: pieces cut at block boundaries with Extend, AppendDigests,
// and one Block at a time. It returns the hashes.
func checkChain(t testing.TB, h *Hasher, tokens []uint32, extra Extra, cut int) []uint64 {
	t.Helper()
	bs := h.BlockSize()
	want := h.AppendHashes(nil, tokens, extra)
	if len(want) != len(tokens)/bs {
		t.Fatalf("AppendHashes(%d tokens, block size %d) gave %d hashes, want %d", len(tokens), bs, len(want), len(tokens)/bs)
	}
	cut = min(cut, len(want)) * bs
	got, last := h.Extend(nil, h.Root(), true, tokens[:cut], extra)
	got, last = h.Extend(got, last, cut == 0, tokens[cut:], extra)
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("Extend in two pieces cut at token %d: block %d = %s, want %s", cut, i, at(got, i), at(want, i))
	}
	digests := h.AppendDigests(nil, h.Root(), true, tokens, extra)
	parent := h.Root()
	for i, d := range digests {
		if d.Value() != want[i] {
			t.Fatalf("AppendDigests block %d = %d, want %d", i, d.Value(), want[i])
		}
		if b := h.Block(parent, i == 0, tokens[i*bs:(i+1)*bs], extra); b != d {
			t.Fatalf("Block(%d) = %s, want %s", i, b, d)
		}
		parent = d
	}
	if len(digests) != len(want) || (len(want) > 0 && last != digests[len(digests)-1]) || (len(want) == 0 && last != h.Root()) {
		t.Fatalf("AppendDigests: %d digests, last %s; want %d, last returned by Extend %s", len(digests), parent, len(want), last)
	}
	return want
}

func TestChain(t *testing.T) {
	extras := []Extra{{}, {LoRA: "lora"}, {CacheSalt: "salt"}, {LoRA: "a", CacheSalt: "a"}}
	for _, algo := range Algorithms {
		for _, bs := range []int{1, 2, 3, 4, 16} {
			h := mustHasher(t, algo, "0", bs)
			for _, extra := range extras {
				for _, n := range []int{0, 1, bs - 1, bs, bs + 1, 5*bs + 2} {
					t.Run(fmt.Sprintf("%s/bs%d/%+v/n%d", algo, bs, extra, n), func(t *testing.T) {
						tokens := iota32(n)
						for cut := range n/bs + 1 {
							checkChain(t, h, tokens, extra, cut)
						}
					})
				}
			}
		}
	}
}

// TestExtraKeys checks which blocks the extra keys change: the salt block 0
// only (and through the chain every later block), the LoRA name every block.
func TestExtraKeys(t *testing.T) {
	for _, algo := range Algorithms {
		h := mustHasher(t, algo, "0", 4)
		tokens := iota32(12)
		base := digestsOf(h, tokens, Extra{})
		salted := digestsOf(h, tokens, Extra{CacheSalt: "s"})
		lora := digestsOf(h, tokens, Extra{LoRA: "l"})
		for i := range base {
			if salted[i] == base[i] || lora[i] == base[i] || lora[i] == salted[i] {
				t.Errorf("%s block %d: base %s, salted %s, lora %s, want all different", algo, i, base[i], salted[i], lora[i])
			}
		}
		// Continuing a salted chain after block 0 does not use the salt again.
		if got := h.Block(salted[0], false, tokens[4:8], Extra{CacheSalt: "s"}); got != salted[1] {
			t.Errorf("%s Block(salted[0], first=false) = %s, want %s", algo, got, salted[1])
		}
		if got := h.Block(salted[0], true, tokens[4:8], Extra{CacheSalt: "s"}); got == salted[1] {
			t.Errorf("%s Block(salted[0], first=true) = %s, want the salt to change it", algo, got)
		}
	}
}

// digestsOf returns the full digests of tokens from the root.
func digestsOf(h *Hasher, tokens []uint32, extra Extra) []Digest {
	return h.AppendDigests(nil, h.Root(), true, tokens, extra)
}

// TestPrefix checks that the hashes of a prefix are a prefix of the hashes.
func TestPrefix(t *testing.T) {
	h := mustHasher(t, SHA256, DefaultSeed, 16)
	tokens := iota32(1000)
	all := h.AppendHashes(nil, tokens, Extra{LoRA: "x"})
	for n := 0; n <= len(tokens); n += 7 {
		got := h.AppendHashes(nil, tokens[:n], Extra{LoRA: "x"})
		if !slices.Equal(got, all[:n/16]) {
			t.Fatalf("AppendHashes(tokens[:%d]) = %v, want %v", n, got, all[:n/16])
		}
	}
}

// TestAppendKeepsDst checks that results are appended after what dst holds.
func TestAppendKeepsDst(t *testing.T) {
	h := mustHasher(t, SHA256, "0", 2)
	got := h.AppendHashes([]uint64{7}, iota32(4), Extra{})
	want := append([]uint64{7}, h.AppendHashes(nil, iota32(4), Extra{})...)
	if !slices.Equal(got, want) {
		t.Errorf("AppendHashes([7], ...) = %v, want %v", got, want)
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	tokens := iota32(8192)
	for i := range tokens {
		tokens[i] *= 524309 // every integer width
	}
	for _, algo := range Algorithms {
		h := mustHasher(t, algo, DefaultSeed, 16)
		extra := Extra{LoRA: "adapter", CacheSalt: "salt"}
		dst := make([]uint64, 0, 512)
		digests := make([]Digest, 0, 512)
		tests := []struct {
			name string
			f    func()
		}{
			{"AppendHashes", func() { dst = h.AppendHashes(dst[:0], tokens, extra) }},
			{"Extend", func() { dst, _ = h.Extend(dst[:0], h.Root(), false, tokens, extra) }},
			{"AppendDigests", func() { digests = h.AppendDigests(digests[:0], h.Root(), true, tokens, extra) }},
			{"Block", func() { _ = h.Block(h.Root(), true, tokens[:16], extra) }},
		}
		for _, tt := range tests {
			tt.f() // warm up
			if got := testing.AllocsPerRun(20, tt.f); got != 0 {
				t.Errorf("%s %s: %v allocations per call, want 0", algo, tt.name, got)
			}
		}
	}
}

// TestConcurrent shares one Hasher between goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	h := mustHasher(t, SHA256CBOR, "42", 16)
	tokens := iota32(16 * 64)
	want := h.AppendHashes(nil, tokens, Extra{LoRA: "l"})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if got := h.AppendHashes(nil, tokens, Extra{LoRA: "l"}); !slices.Equal(got, want) {
					t.Errorf("concurrent AppendHashes differs at block %d", firstDiff(got, want))
					return
				}
			}
		})
	}
	wg.Wait()
}
