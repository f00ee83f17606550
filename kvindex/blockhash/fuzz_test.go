package blockhash

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// FuzzHasher checks invariants of the hash chain on arbitrary input, for
// every algorithm (Algorithms[algo%4]): no panic; hashing in pieces
// (Extend), full digests (AppendDigests) and one block at a time (Block)
// agree with AppendHashes; the hashes of a prefix are a prefix of the
// hashes; and the CBOR encoding equals fxamacker/cbor's.
func FuzzHasher(f *testing.F) {
	for _, s := range []struct {
		algo       Algorithm
		seed       string
		blockSize  uint8
		tokens     []uint32
		lora, salt string
	}{
		{SHA256CBOR, "0", 16, iota32(48), "", ""},
		{SHA256CBOR, "", 16, iota32(48), "my-lora", ""},
		{SHA256CBOR, "0", 16, iota32(50), "", "salt"},
		{SHA256, DefaultSeed, 1, tokenEdges, "a", "a"},
		{SHA256, "42", 3, tokenEdges, "é", "é"},
		{SHA256, "42", 4, tokenEdges, "ab", "ab"},
		{SHA256CBOR, "42", 2, tokenEdges, "語", "😀"},
		{XXHash, "0", 16, iota32(48), "my-lora", ""},
		{XXHash, "42", 3, tokenEdges, "é", "é"},
		{XXHashCBOR, "0", 16, iota32(50), "", "salt"},
		{XXHashCBOR, "42", 2, tokenEdges, "語", "😀"},
	} {
		raw := make([]byte, 0, 4*len(s.tokens))
		for _, t := range s.tokens {
			raw = binary.LittleEndian.AppendUint32(raw, t)
		}
		f.Add(uint8(slices.Index(Algorithms, s.algo)), s.seed, s.blockSize, raw, s.lora, s.salt, uint8(1))
	}
	f.Fuzz(func(t *testing.T, a uint8, seed string, blockSize uint8, raw []byte, lora, salt string, cut uint8) {
		algo := Algorithms[int(a)%len(Algorithms)]
		h, err := NewHasher(Config{Algorithm: algo, Seed: seed, BlockSize: int(blockSize)})
		if err != nil {
			return // block size 0 or a seed that is not UTF-8: refused, no panic
		}
		tokens := make([]uint32, len(raw)/4)
		for i := range tokens {
			tokens[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		extra := Extra{LoRA: lora, CacheSalt: salt}
		all := checkChain(t, h, tokens, extra, int(cut))
		half := tokens[:len(tokens)/2]
		if got := h.AppendHashes(nil, half, extra); !slices.Equal(got, all[:len(got)]) {
			t.Fatalf("AppendHashes(first %d tokens) = %v, not a prefix of %v", len(half), got, all)
		}
		if algo.cbor() {
			checkCBOR(t, h, tokens[:min(len(tokens), int(blockSize))], lora, salt)
		}
	})
}

// checkCBOR compares one block's CBOR encoding with fxamacker/cbor's.
func checkCBOR(t *testing.T, h *Hasher, tokens []uint32, lora, salt string) {
	t.Helper()
	var extra any
	if keys := slices.DeleteFunc([]string{lora, salt}, func(s string) bool { return s == "" }); len(keys) > 0 {
		extra = keys
	}
	root := h.Root()
	p := root[SHA256Size-h.DigestSize():]
	want, err := cbor.Marshal([]any{p, tokens, extra})
	if err != nil {
		t.Fatal(err)
	}
	if got := appendCBORBlock(nil, p, tokens, lora, salt); !bytes.Equal(got, want) {
		t.Fatalf("appendCBORBlock(%v, %q, %q) = %x, want %x", tokens, lora, salt, got, want)
	}
}
