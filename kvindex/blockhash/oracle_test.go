package blockhash

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// hashCase is one input of the differential test, as hash_oracle.py reads it.
type hashCase struct {
	Algo      Algorithm `json:"algo"`
	Seed      string    `json:"seed"`
	BlockSize int       `json:"block_size"`
	Tokens    []uint32  `json:"tokens"`
	LoRA      string    `json:"lora"`
	Salt      string    `json:"salt"`
	MM        []mmCase  `json:"mm,omitempty"` // multimodal items, by offset
	Bytes     bool      `json:"bytes"`        // also compare the encoded bytes
}

// mmCase is a multimodal item as hash_oracle.py reads it: [identifier,
// offset, length].
type mmCase [3]any

func (c hashCase) extra() Extra {
	e := Extra{LoRA: c.LoRA, CacheSalt: c.Salt}
	for _, m := range c.MM {
		e.MM = append(e.MM, MMItem{Hash: m[0].(string), Offset: m[1].(int), Length: m[2].(int)})
	}
	return e
}

// oracleResult is hash_oracle.py's answer for one hashCase (hex strings).
type oracleResult struct {
	Root       string   `json:"root"`
	Blocks     []string `json:"blocks"`
	Values     []uint64 `json:"values"`
	SeedBytes  string   `json:"seed_bytes"`
	BlockBytes []string `json:"block_bytes"`
}

var (
	oracleSeeds      = []string{"", "0", "42", DefaultSeed}
	oracleBlockSizes = []int{1, 2, 3, 4, 16, 64}
	// tokenEdges are the boundaries of every integer encoding width.
	tokenEdges = []uint32{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<31 - 1, 1 << 31, 1<<32 - 1}
)

// randomToken draws a token of a random encoding width, or an edge value.
func randomToken(rng *rand.Rand) uint32 {
	switch rng.IntN(6) {
	case 0:
		return uint32(rng.IntN(24))
	case 1:
		return uint32(24 + rng.IntN(256-24))
	case 2:
		return uint32(256 + rng.IntN(65536-256))
	case 3:
		return uint32(65536 + rng.Int64N(1<<31-65536))
	case 4:
		return uint32(1<<31 + rng.Int64N(1<<31))
	default:
		return tokenEdges[rng.IntN(len(tokenEdges))]
	}
}

// randomString draws an extra key: one character (ASCII, Latin-1 or beyond,
// which matters to pickle's memo), short, multi-byte, or around the length
// boundaries of CBOR and pickle string heads.
func randomString(rng *rand.Rand) string {
	pieces := []string{"a", "Z", "é", "ÿ", "Ā", "語", "😀", "-", "lora", " "}
	switch rng.IntN(6) {
	case 0:
		return pieces[rng.IntN(len(pieces))]
	case 1:
		return "adapter-" + fmt.Sprint(rng.IntN(1000))
	case 2:
		return strings.Repeat("x", []int{23, 24, 255, 256, 300}[rng.IntN(5)])
	default:
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
}

// randomCase returns case i of the differential test: i walks through every
// algorithm, seed, block size and extra-key combination; tokens and strings
// are random.
func randomCase(rng *rand.Rand, i int) hashCase {
	c := hashCase{
		Algo:      []Algorithm{SHA256, SHA256CBOR}[i%2],
		Seed:      oracleSeeds[i/2%len(oracleSeeds)],
		BlockSize: oracleBlockSizes[i/8%len(oracleBlockSizes)],
		Bytes:     i%7 == 0,
	}
	combo := i / 48 % 4 // none, lora, salt, both
	if combo&1 != 0 {
		c.LoRA = randomString(rng)
	}
	if combo&2 != 0 {
		c.Salt = randomString(rng)
		if c.LoRA != "" && rng.IntN(4) == 0 {
			c.Salt = c.LoRA // equal keys: one shared object in Python, or two
		}
	}
	n := rng.IntN(6)*c.BlockSize + rng.IntN(c.BlockSize+1)
	c.Tokens = make([]uint32, n)
	for j := range c.Tokens {
		c.Tokens[j] = randomToken(rng)
	}
	return c
}

// framingCases cross CPython's 64 KiB pickle frames: big blocks whose frame
// fills up right at, before and after the end of the tuple, and strings long
// enough to be written outside any frame.
func framingCases() []hashCase {
	fill := func(n int, v uint32) []uint32 {
		t := make([]uint32, n)
		for i := range t {
			t[i] = v + uint32(i%3)
		}
		return t
	}
	var cases []hashCase
	for _, n := range []int{13098, 13099, 13100, 13101} { // 5-byte ints
		cases = append(cases, hashCase{Algo: SHA256, Seed: "0", BlockSize: n, Tokens: fill(n, 70000), Bytes: true})
	}
	long := strings.Repeat("L", 70000)
	return append(cases,
		hashCase{Algo: SHA256, Seed: "0", BlockSize: 9400, Tokens: fill(28200, 3_000_000_000), LoRA: "a", Salt: "a", Bytes: true},
		hashCase{Algo: SHA256, Seed: long, BlockSize: 4, Tokens: fill(9, 7), LoRA: long, Salt: "s", Bytes: true},
		hashCase{Algo: SHA256, Seed: "x", BlockSize: 2, Tokens: fill(4, 1), LoRA: "l", Salt: long + "é", Bytes: true},
		hashCase{Algo: SHA256CBOR, Seed: long, BlockSize: 3, Tokens: fill(7, 100000), LoRA: long, Salt: long, Bytes: true},
	)
}

// mmCases have multimodal items: placeholders within a block, across
// blocks, ending or starting at a boundary, adjacent, two in one block,
// with and without a LoRA and a salt, offsets needing every integer width.
func mmCases(rng *rand.Rand) []hashCase {
	hash := func() string { return fmt.Sprintf("%064x", rng.Uint64()) }
	var cases []hashCase
	for i := range 64 {
		c := hashCase{
			Algo: []Algorithm{SHA256, SHA256CBOR}[i%2], Seed: oracleSeeds[i/2%len(oracleSeeds)],
			BlockSize: []int{1, 4, 16, 300}[i/8%4], Bytes: i%3 == 0,
		}
		if i/4%2 == 1 {
			c.LoRA = randomString(rng)
		}
		if i/16%2 == 1 {
			c.Salt = randomString(rng)
		}
		n := c.BlockSize * (2 + rng.IntN(40))
		if c.BlockSize == 300 {
			n = 300 * (2 + rng.IntN(3))
		}
		for at := rng.IntN(c.BlockSize + 3); at < n; {
			length := 1 + rng.IntN(3*c.BlockSize)
			if rng.IntN(4) == 0 { // end on a block boundary
				length = max(1, (at/c.BlockSize+1)*c.BlockSize-at)
			}
			c.MM = append(c.MM, mmCase{[]string{hash(), "a"}[min(rng.IntN(8), 1)], at, length})
			at += length + []int{0, 1, c.BlockSize, 70000}[rng.IntN(4)]
		}
		c.Tokens = make([]uint32, n+rng.IntN(c.BlockSize))
		for j := range c.Tokens {
			c.Tokens[j] = randomToken(rng)
		}
		cases = append(cases, c)
	}
	return cases
}

// TestMultimodalKeysMatchPython compares the hashes of prompts with
// multimodal items, every block overlapping a placeholder keyed with
// (identifier, offset in the block), with Python's.
func TestMultimodalKeysMatchPython(t *testing.T) {
	diffOracle(t, mmCases(rand.New(rand.NewPCG(2026, 29))))
}

// runOracle pipes cases to hash_oracle.py in one Python process. Cases of
// the xxhash algorithms need python3-xxhash: without it the test is skipped
// locally and fails under CI=true.
func runOracle(t *testing.T, cases []hashCase) []oracleResult {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s (Debian's Python, the hash oracle) is missing: run `make deps`: %v", python, err)
	}
	in, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "testdata/hash_oracle.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Fatalf("hash oracle: %s(python3-cbor2 is installed by `make deps`)", stderr.String())
	}
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 4 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("hash oracle under CI: %s(python3-xxhash is installed by `make deps`)", stderr.String())
		}
		t.Skipf("hash oracle: %s(python3-xxhash is installed by `make deps`)", stderr.String())
	}
	if err != nil {
		t.Fatalf("hash oracle: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Python  string         `json:"python"`
		CBOR2   string         `json:"cbor2"`
		XXHash  string         `json:"xxhash"`
		Results []oracleResult `json:"results"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("hash oracle output: %v", err)
	}
	if len(doc.Results) != len(cases) {
		t.Fatalf("hash oracle answered %d cases, want %d", len(doc.Results), len(cases))
	}
	t.Logf("oracle: Python %s, cbor2 %s, xxhash %q, %d cases", doc.Python, doc.CBOR2, doc.XXHash, len(cases))
	return doc.Results
}

// heldCases returns the held chains of the differential tests: random cases
// from a fixed seed, then the framing cases, in the SHA-256 algorithms.
func heldCases() []hashCase {
	rng := rand.New(rand.NewPCG(2026, 11))
	var cases []hashCase
	for i := range 1536 {
		cases = append(cases, randomCase(rng, i))
	}
	return append(cases, framingCases()...)
}

// TestHashesMatchPython compares every block hash and event integer (and,
// for a subset, the encoded bytes) with Python's pickle/hashlib and cbor2.
func TestHashesMatchPython(t *testing.T) {
	diffOracle(t, heldCases())
}

// TestXXHashMatchesPython hashes the held chains of TestHashesMatchPython
// with the xxhash algorithms instead (pickle bytes for sha256, CBOR bytes
// for sha256_cbor) and compares with Python's xxhash.xxh3_128_digest.
func TestXXHashMatchesPython(t *testing.T) {
	cases := heldCases()
	for i := range cases {
		cases[i].Algo = map[Algorithm]Algorithm{SHA256: XXHash, SHA256CBOR: XXHashCBOR}[cases[i].Algo]
	}
	diffOracle(t, cases)
}

// diffOracle compares the Go hashes of cases with the oracle's.
func diffOracle(t *testing.T, cases []hashCase) {
	t.Helper()
	results := runOracle(t, cases)
	blocks, failed := 0, 0
	for i, c := range cases {
		blocks += len(results[i].Blocks)
		if err := compareCase(c, results[i]); err != nil {
			if failed++; failed > 10 {
				t.Fatal("too many differences")
			}
			t.Errorf("case %d (%s, seed %.20q, block size %d, lora %.20q, salt %.20q, %d tokens): %v",
				i, c.Algo, c.Seed, c.BlockSize, c.LoRA, c.Salt, len(c.Tokens), err)
		}
	}
	t.Logf("%d cases, %d blocks compared", len(cases), blocks)
}

// compareCase reports the first difference between Go and the oracle: in
// the encoded bytes first, when the case asks for them, then in the digests.
func compareCase(c hashCase, want oracleResult) error {
	h, err := NewHasher(Config{Algorithm: c.Algo, Seed: c.Seed, BlockSize: c.BlockSize})
	if err != nil {
		return err
	}
	extra := c.extra()
	digests := h.AppendDigests(nil, h.Root(), true, c.Tokens, extra)
	if c.Bytes {
		if err := compareBytes(h, c, extra, digests, want); err != nil {
			return err
		}
	}
	if got := hexOf(h, h.Root()); got != want.Root {
		return fmt.Errorf("Root() = %s, want %s", got, want.Root)
	}
	got := make([]string, len(digests))
	for i, d := range digests {
		got[i] = hexOf(h, d)
	}
	if i := firstDiff(got, want.Blocks); i >= 0 {
		return fmt.Errorf("block %d = %s, want %s", i, at(got, i), at(want.Blocks, i))
	}
	values := h.AppendHashes(nil, c.Tokens, extra)
	if i := firstDiff(values, want.Values); i >= 0 {
		return fmt.Errorf("block %d value = %s, want %s", i, at(values, i), at(want.Values, i))
	}
	return nil
}

// compareBytes compares the encodings of the seed and of every block with
// the oracle's, each block with the oracle's parent.
func compareBytes(h *Hasher, c hashCase, extra Extra, digests []Digest, want oracleResult) error {
	if err := compareHex("seed encoding", hex.EncodeToString(h.encodeSeed(nil)), want.SeedBytes); err != nil {
		return err
	}
	if len(want.BlockBytes) != len(digests) {
		return fmt.Errorf("%d blocks, oracle encoded %d", len(digests), len(want.BlockBytes))
	}
	parent := h.Root()
	for i := range want.BlockBytes {
		bs := c.BlockSize
		enc := h.encodeBlock(nil, &parent, c.Tokens[i*bs:(i+1)*bs], extra, i == 0, i*bs)
		if err := compareHex(fmt.Sprintf("block %d encoding", i), hex.EncodeToString(enc), want.BlockBytes[i]); err != nil {
			return err
		}
		if i+1 < len(want.Blocks) {
			b, err := hex.DecodeString(want.Blocks[i])
			if err == nil {
				parent, err = DigestFromBytes(b)
			}
			if err != nil {
				return fmt.Errorf("oracle digest %d: %w", i, err)
			}
		}
	}
	return nil
}

// compareHex reports the first differing byte of two hex strings.
func compareHex(what, got, want string) error {
	if got == want {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	i &^= 1
	show := func(s string) string { return s[i:min(len(s), i+48)] }
	return fmt.Errorf("%s differs at byte %d (lengths %d, %d): got …%s, want …%s", what, i/2, len(got)/2, len(want)/2, show(got), show(want))
}
