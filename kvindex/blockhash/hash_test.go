package blockhash

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// iota32 returns the tokens 0, 1, ..., n-1.
func iota32(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i)
	}
	return t
}

func mustHasher(t testing.TB, algo Algorithm, seed string, blockSize int) *Hasher {
	t.Helper()
	h, err := NewHasher(Config{Algorithm: algo, Seed: seed, BlockSize: blockSize})
	if err != nil {
		t.Fatalf("NewHasher(%s, %q, %d) = %v", algo, seed, blockSize, err)
	}
	return h
}

// TestKnownVectors checks every vector of docs/vllm.md §1.
func TestKnownVectors(t *testing.T) {
	tests := []struct {
		name       string
		seed       string
		extra      Extra
		rootPrefix string // "" when the spec gives no root
		rootSuffix string
		want       []uint64
	}{
		{"seed 0", "0", Extra{}, "4e1195df", "2e61c3e", []uint64{12687895063098490012, 1814341696565857452, 2713165534665270607}},
		{"seed empty", "", Extra{}, "8d33f520", "763f13d3", []uint64{14620552727165982086, 2501229464696595326, 4995737767712428611}},
		{"seed default", DefaultSeed, Extra{}, "9bd96a48", "9581eef0", []uint64{2233398808101521225, 17911472383915781900, 554445467503876716}},
		{"lora", "0", Extra{LoRA: "my-lora"}, "", "", []uint64{14363917845617146483, 14169151309622765391, 8968918875924509582}},
		{"salt", "0", Extra{CacheSalt: "salt"}, "", "", []uint64{8471034540256156344, 17414453070839758398, 15215922227030957406}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := mustHasher(t, SHA256CBOR, tt.seed, 16)
			root := h.Root().String()
			if !strings.HasPrefix(root, tt.rootPrefix) || !strings.HasSuffix(root, tt.rootSuffix) {
				t.Errorf("Root(%q) = %s, want %s…%s", tt.seed, root, tt.rootPrefix, tt.rootSuffix)
			}
			tokens := append(iota32(48), 48, 49, 50) // a partial block is ignored
			if got := h.AppendHashes(nil, tokens, tt.extra); !slices.Equal(got, tt.want) {
				t.Errorf("AppendHashes(0..50, %+v) = %v, want %v", tt.extra, got, tt.want)
			}
		})
	}
}

// TestXXHashVectors checks the xxhash vectors of docs/vllm.md §1, computed
// with Python's pickle, cbor2 and xxhash.xxh3_128_digest: the 16-byte root
// and the event integers of three blocks of 0..47 (block size 16).
func TestXXHashVectors(t *testing.T) {
	tests := []struct {
		algo  Algorithm
		seed  string
		extra Extra
		root  string
		want  []uint64
	}{
		{XXHash, "0", Extra{}, "6fb31cc38bba6066183f7f2104b9c051", []uint64{12446601617588617037, 15415768829451575322, 9624497515420564099}},
		{XXHash, DefaultSeed, Extra{}, "d98f72b9c430d985211489af307f0229", []uint64{1222083579125300142, 5699067059169647355, 13514554514139066512}},
		{XXHash, "0", Extra{LoRA: "my-lora"}, "6fb31cc38bba6066183f7f2104b9c051", []uint64{12632952623463347640, 12993064451490850988, 8966365483136314140}},
		{XXHashCBOR, "0", Extra{}, "1ebe36576dcb573f26b99533a20aaeca", []uint64{4168120356241826254, 9934807162112882475, 13167754217454818525}},
		{XXHashCBOR, DefaultSeed, Extra{}, "a4e364baa0791a6f63bbf917db9b700d", []uint64{11534027033812148684, 206661239557022900, 16401314966178489093}},
		{XXHashCBOR, "0", Extra{LoRA: "my-lora"}, "1ebe36576dcb573f26b99533a20aaeca", []uint64{1800048193177735191, 8423925966018769841, 13876067864793695936}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%+v", tt.algo, tt.seed, tt.extra), func(t *testing.T) {
			h := mustHasher(t, tt.algo, tt.seed, 16)
			if got := h.Root(); hexOf(h, got) != tt.root || got != mustDigest(t, tt.root) || h.DigestSize() != XXH128Size {
				t.Errorf("Root() = %s (digest size %d), want %s right-aligned (16 bytes)", got, h.DigestSize(), tt.root)
			}
			tokens := append(iota32(48), 48, 49, 50) // a partial block is ignored
			if got := h.AppendHashes(nil, tokens, tt.extra); !slices.Equal(got, tt.want) {
				t.Errorf("AppendHashes(0..50, %+v) = %v, want %v", tt.extra, got, tt.want)
			}
		})
	}
}

// TestEncodings checks the byte strings docs/vllm.md spells out and a few
// shapes Python produced (the differential test covers the rest).
func TestEncodings(t *testing.T) {
	parent := bytes.Repeat([]byte{0x11}, SHA256Size)
	short := bytes.Repeat([]byte{0x11}, XXH128Size)
	p := hex.EncodeToString(parent)
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"pickle seed 0", appendPickleString(nil, "0"), "80059505000000000000008c0130942e"},
		{"pickle seed empty", appendPickleString(nil, ""), "80059504000000000000008c00942e"},
		{"cbor seed 0", appendCBORText(nil, "0"), "6130"},
		{"pickle 1 token", appendPickleBlock(nil, parent, []uint32{1}, "", ""), "8005952b000000000000004320" + p + "944b0185944e87942e"},
		{"pickle 3 tokens", appendPickleBlock(nil, parent, []uint32{1, 2, 3}, "", ""), "8005952f000000000000004320" + p + "944b014b024b0387944e87942e"},
		{"pickle 4 tokens", appendPickleBlock(nil, parent, []uint32{1, 2, 3, 4}, "", ""), "80059532000000000000004320" + p + "94284b014b024b034b0474944e87942e"},
		{"pickle no tokens", appendPickleBlock(nil, parent, nil, "", ""), "80059528000000000000004320" + p + "94294e87942e"},
		{"pickle shared string", appendPickleBlock(nil, parent, []uint32{1, 2}, "a", "a"), "80059534000000000000004320" + p + "944b014b0286948c0161946802869487942e"},
		{"cbor widths", appendCBORBlock(nil, parent, []uint32{1, 2, 300, 70000, 1<<32 - 1}, "ab", ""), "835820" + p + "85010219012c1a000111701affffffff81626162"},
		{"cbor no tokens", appendCBORBlock(nil, parent, nil, "", ""), "835820" + p + "80f6"},
		{"pickle 16-byte parent", appendPickleBlock(nil, short, []uint32{1}, "", ""), "8005951b00000000000000431011111111111111111111111111111111944b0185944e87942e"},
		{"cbor 16-byte parent", appendCBORBlock(nil, short, []uint32{1}, "", ""), "8350111111111111111111111111111111118101f6"},
	}
	for _, tt := range tests {
		if got := hex.EncodeToString(tt.got); got != tt.want {
			t.Errorf("%s: encoding = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// hexOf returns the digest bytes of d, as h made it, in hex.
func hexOf(h *Hasher, d Digest) string { return hex.EncodeToString(d[SHA256Size-h.DigestSize():]) }

// mustDigest returns the Digest of the hex string s.
func mustDigest(t testing.TB, s string) Digest {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DigestFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// vllmCapture is a KV event captured from a real vLLM (see
// testdata/vllm/README.md at the module root).
type vllmCapture struct {
	TokenIDs        []uint32 `json:"token_ids"`
	BlockHashes     []uint64 `json:"block_hashes"`
	ParentBlockHash *uint64  `json:"parent_block_hash"`
	BlockSize       int      `json:"block_size"`
	HashSeed        string   `json:"hash_seed"`
	LoRAName        *string  `json:"lora_name"`
}

// TestVLLMCaptures hashes the token ids of two real vLLM events and expects
// exactly the hashes vLLM published (seed "42", sha256_cbor).
func TestVLLMCaptures(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "vllm") // the module root's
	for _, name := range []string{"kv_event_base.json", "kv_event_lora.json"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			var c vllmCapture
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if c.ParentBlockHash != nil || len(c.BlockHashes) != 25 || len(c.TokenIDs) != 25*c.BlockSize {
				t.Fatalf("%s: unexpected capture shape: parent %v, %d hashes, %d tokens", name, c.ParentBlockHash, len(c.BlockHashes), len(c.TokenIDs))
			}
			var extra Extra
			if c.LoRAName != nil {
				extra.LoRA = *c.LoRAName
			}
			h := mustHasher(t, SHA256CBOR, c.HashSeed, c.BlockSize)
			got := h.AppendHashes(nil, c.TokenIDs, extra)
			if i := firstDiff(got, c.BlockHashes); i >= 0 {
				t.Fatalf("AppendHashes(%s, %+v) block %d = %s, want %s", name, extra, i, at(got, i), at(c.BlockHashes, i))
			}
		})
	}
}

// firstDiff returns the first index where a and b differ (in value or
// length), or -1.
func firstDiff[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// at formats s[i], or "(none)" past the end.
func at[T any](s []T, i int) string {
	if i >= len(s) {
		return "(none)"
	}
	b, _ := json.Marshal(s[i])
	return string(b)
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		cfg  Config
		want []string // substrings of the error
	}{
		{Config{Algorithm: SHA256, BlockSize: 0}, []string{"block_size: 0"}},
		{Config{Algorithm: SHA256CBOR, BlockSize: -16}, []string{"block_size: -16"}},
		{Config{Algorithm: "xxhash64", BlockSize: 16}, []string{`algorithm: "xxhash64", want one of`, `"xxhash_cbor"`}},
		{Config{Algorithm: "", BlockSize: 16}, []string{`algorithm: "", want one of`}},
		{Config{Algorithm: "md5", Seed: "\xff", BlockSize: -1}, []string{"algorithm: \"md5\"", "seed: \"\\xff\" is not valid UTF-8", "block_size: -1"}},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", tt.cfg)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v.Validate() = %v, want it to mention %q", tt.cfg, err, w)
			}
		}
		if h, err2 := NewHasher(tt.cfg); h != nil || err2 == nil || err2.Error() != err.Error() {
			t.Errorf("NewHasher(%+v) = %v, %v, want nil, %v", tt.cfg, h, err2, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v, want nil", err)
	}
}

func TestParseAlgorithm(t *testing.T) {
	tests := []struct {
		in      string
		want    Algorithm
		wantErr bool
	}{
		{"sha256", SHA256, false},
		{"sha256_cbor", SHA256CBOR, false},
		{"xxhash", XXHash, false},
		{"xxhash_cbor", XXHashCBOR, false},
		{"SHA256", "", true},
		{"XXHASH", "", true},
		{"xxh3_128", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ParseAlgorithm(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrUnknownAlgorithm)) {
			t.Errorf("ParseAlgorithm(%q) = %q, %v, want %q (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDigestFromBytes(t *testing.T) {
	h := mustHasher(t, SHA256, "0", 16)
	root := h.Root()
	if got, err := DigestFromBytes(root[:]); got != root || err != nil {
		t.Errorf("DigestFromBytes(root) = %s, %v, want %s, nil", got, err, root)
	}
	x := mustHasher(t, XXHash, "0", 16).Root()
	if got, err := DigestFromBytes(x[XXH128Size:]); got != x || err != nil || x != xxhSum(appendPickleString(nil, "0")) {
		t.Errorf("DigestFromBytes(xxhash root's 16 bytes) = %s, %v, want %s, nil", got, err, x)
	}
	for _, n := range []int{0, 8, 15, 17, 31, 33} {
		if got, err := DigestFromBytes(make([]byte, n)); !errors.Is(err, ErrDigestLength) || got != (Digest{}) {
			t.Errorf("DigestFromBytes(%d bytes) = %s, %v, want a zero digest and %v", n, got, err, ErrDigestLength)
		}
	}
	// A 16-byte digest is right-aligned, after 16 zero bytes.
	if got, want := mustDigest(t, strings.Repeat("ab", 16)), mustDigest(t, strings.Repeat("00", 16)+strings.Repeat("ab", 16)); got != want {
		t.Errorf("DigestFromBytes(16 bytes) = %s, want %s", got, want)
	}
	tests := []struct {
		hex  string
		want uint64
	}{
		{strings.Repeat("ff", 24) + "8000000000000001", 1<<63 | 1},          // the last 8 bytes of 32
		{"ffffffffffffffff" + "8000000000000002", 1<<63 | 2},                // the low half of xxh3_128
		{strings.Repeat("00", 8) + "0102030405060708", 0x0102030405060708},  // 16 bytes
		{strings.Repeat("00", 24) + "0102030405060708", 0x0102030405060708}, // 32 bytes
	}
	for _, tt := range tests {
		if got := mustDigest(t, tt.hex).Value(); got != tt.want {
			t.Errorf("Digest(%s).Value() = %#x, want %#x", tt.hex, got, tt.want)
		}
	}
}
