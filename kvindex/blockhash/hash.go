package blockhash

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Algorithm names one of vLLM's prefix-caching hash functions, spelled as
// vLLM's --prefix-caching-hash-algo flag spells it.
type Algorithm string

// The hash algorithms kvrouter implements: every value of vLLM's
// --prefix-caching-hash-algo. They differ in the hash function (SHA-256, or
// xxHash's XXH3 with 128 bits) and in how the hashed Python object is
// serialized (pickle protocol 5, or canonical CBOR).
const (
	// SHA256 hashes pickle.dumps(obj, protocol=5) with SHA-256. It is vLLM's
	// default.
	SHA256 Algorithm = "sha256"
	// SHA256CBOR hashes cbor2.dumps(obj, canonical=True) with SHA-256.
	SHA256CBOR Algorithm = "sha256_cbor"
	// XXHash hashes the pickle bytes of SHA256 with xxh3_128; the digest is
	// 16 bytes, the high 64 bits first, each half big-endian (Python's
	// xxhash.xxh3_128_digest).
	XXHash Algorithm = "xxhash"
	// XXHashCBOR hashes the CBOR bytes of SHA256CBOR with xxh3_128, giving
	// the same 16-byte digest as XXHash.
	XXHashCBOR Algorithm = "xxhash_cbor"
)

// Algorithms lists every Algorithm, vLLM's default first.
var Algorithms = []Algorithm{SHA256, SHA256CBOR, XXHash, XXHashCBOR}

// cbor reports whether a serializes with canonical CBOR rather than pickle.
func (a Algorithm) cbor() bool { return a == SHA256CBOR || a == XXHashCBOR }

// xxh reports whether a hashes with xxh3_128 rather than SHA-256.
func (a Algorithm) xxh() bool { return a == XXHash || a == XXHashCBOR }

// DefaultSeed is the seed vLLM ≥ v0.30 uses when PYTHONHASHSEED is unset.
const DefaultSeed = "vllm-none-hash"

// DefaultBlockSize is vLLM's default KV-cache block size on GPUs, in tokens.
const DefaultBlockSize = 16

// ErrUnknownAlgorithm is returned for an algorithm name kvrouter does not
// implement.
var ErrUnknownAlgorithm = errors.New("blockhash: unknown hash algorithm")

// ParseAlgorithm returns the Algorithm named s ("sha256", "sha256_cbor",
// "xxhash" or "xxhash_cbor"), for command-line flags and configuration files.
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := Algorithm(s); slices.Contains(Algorithms, a) {
		return a, nil
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrUnknownAlgorithm, s, AlgorithmNames())
}

// AlgorithmNames returns the names of Algorithms, quoted and separated by
// commas, for error messages and help texts.
func AlgorithmNames() string {
	var b []byte
	for i, a := range Algorithms {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%q", a)
	}
	return string(b)
}

// Config says how a vLLM pod hashes its prefix-cache blocks. Every field
// must equal the pod's own setting, or no hash kvrouter computes will ever
// match an event from that pod.
type Config struct {
	// Algorithm is the pod's --prefix-caching-hash-algo: SHA256 (vLLM's
	// default), SHA256CBOR, XXHash or XXHashCBOR.
	Algorithm Algorithm `yaml:"algorithm"`
	// Seed is the pod's PYTHONHASHSEED as a string ("0", "42", ...); the chain
	// root is the hash of this string. The empty string is a real seed, hashed
	// as "". When PYTHONHASHSEED is unset, vLLM ≥ v0.30 uses DefaultSeed and
	// older releases use random bytes no router can reproduce. Must be valid
	// UTF-8.
	Seed string `yaml:"seed"`
	// BlockSize is the number of tokens per KV-cache block (vLLM's
	// --block-size, reported in BlockStored events); > 0.
	BlockSize int `yaml:"block_size"`
}

// DefaultConfig returns the configuration of a vLLM ≥ v0.30 pod started
// without --prefix-caching-hash-algo, PYTHONHASHSEED or --block-size.
func DefaultConfig() Config {
	return Config{Algorithm: SHA256, Seed: DefaultSeed, BlockSize: DefaultBlockSize}
}

// Validate reports every problem of c at once, each beginning with its
// setting's key (algorithm, seed, block_size).
func (c Config) Validate() error {
	var errs []error
	if _, err := ParseAlgorithm(string(c.Algorithm)); err != nil {
		errs = append(errs, fmt.Errorf("algorithm: %q, want one of %s", c.Algorithm, AlgorithmNames()))
	}
	if !utf8.ValidString(c.Seed) {
		errs = append(errs, fmt.Errorf("seed: %q is not valid UTF-8", c.Seed))
	}
	if c.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("block_size: %d, want a block size > 0", c.BlockSize))
	}
	return errors.Join(errs...)
}

// The digest lengths, in bytes.
const (
	// SHA256Size is the length of a SHA-256 digest (SHA256, SHA256CBOR).
	SHA256Size = sha256.Size
	// XXH128Size is the length of an xxh3_128 digest (XXHash, XXHashCBOR).
	XXH128Size = 16
)

// Digest is the full digest of one block, the parent of the next block in a
// chain: the 32 bytes of a SHA-256 digest, or the 16 bytes of an xxh3_128
// digest right-aligned (its first 16 bytes are zero), so that Value reads
// the last 8 bytes of either. The Hasher that made a Digest knows its size
// (DigestSize); the zero Digest is 32 zero bytes.
type Digest [SHA256Size]byte

// Value returns the 64-bit integer vLLM publishes in KV events for d, its
// int.from_bytes(digest, "big") & (2**64-1): the last 8 bytes of the digest
// read big-endian (for xxh3_128, its low 64 bits). It is the key of the
// Index.
func (d Digest) Value() uint64 { return binary.BigEndian.Uint64(d[SHA256Size-8:]) }

// ErrDigestLength is returned for a digest that is neither 32 nor 16 bytes
// long.
var ErrDigestLength = errors.New("blockhash: digest is neither 32 (SHA-256) nor 16 (xxh3_128) bytes")

// DigestFromBytes returns the Digest held in b, such as a raw block hash of a
// KV event sent with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: 32 bytes
// (SHA-256), or 16 (xxh3_128), which it right-aligns. It refuses any other
// length (truncated input).
func DigestFromBytes(b []byte) (Digest, error) {
	var d Digest
	if len(b) != SHA256Size && len(b) != XXH128Size {
		return d, fmt.Errorf("%w: got %d bytes", ErrDigestLength, len(b))
	}
	copy(d[SHA256Size-len(b):], b)
	return d, nil
}

// xxhSum returns the xxh3_128 Digest of b: hi64‖lo64, big-endian, as
// Python's xxhash.xxh3_128_digest spells it, right-aligned.
func xxhSum(b []byte) (d Digest) {
	u := xxh3.Hash128(b)
	binary.BigEndian.PutUint64(d[SHA256Size-16:], u.Hi)
	binary.BigEndian.PutUint64(d[SHA256Size-8:], u.Lo)
	return d
}

// String returns d in lowercase hex, all 32 bytes (a 16-byte digest after
// 32 zeros).
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Extra holds a request's extra hash keys. The empty string means absent.
type Extra struct {
	// LoRA is the name of the LoRA adapter the request uses (its "model" when
	// that names an adapter); it is a key of every block.
	LoRA string
	// CacheSalt is the request's cache_salt; it is a key of block 0 only.
	CacheSalt string
	// MM are the prompt's multimodal items, by offset: a block their
	// placeholders overlap carries a key of each (MMItem).
	MM []MMItem
}

// Hasher computes vLLM's prefix-cache block hashes for one Config:
// block i of a token sequence hashes the tuple (parent digest, tokens of the
// block, extra keys), where the parent of block 0 is Root.
//
// A Hasher is safe for concurrent use; the router shares one per
// configuration. Its methods allocate nothing in steady state beyond growing
// the caller's slice: each call borrows a scratch encoding buffer from a pool.
type Hasher struct {
	cfg       Config
	cbor, xxh bool // cfg.Algorithm's serialization and hash function
	size      int  // SHA256Size or XXH128Size
	root      Digest
	pool      sync.Pool // of *scratch
}

// scratch is the per-call encoding buffer.
type scratch struct{ buf []byte }

// NewHasher returns a Hasher for cfg, or cfg's validation error.
func NewHasher(cfg Config) (*Hasher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Hasher{cfg: cfg, cbor: cfg.Algorithm.cbor(), xxh: cfg.Algorithm.xxh(), size: SHA256Size}
	if h.xxh {
		h.size = XXH128Size
	}
	h.pool.New = func() any { return &scratch{buf: make([]byte, 0, 256)} }
	s := h.get()
	h.root = h.sum(s, h.encodeSeed(s.buf[:0]))
	h.put(s)
	return h, nil
}

// Config returns the configuration h was built with.
func (h *Hasher) Config() Config { return h.cfg }

// DigestSize returns the length of h's digests in bytes: SHA256Size, or
// XXH128Size for the xxHash algorithms, whose digests are the last
// XXH128Size bytes of a Digest.
func (h *Hasher) DigestSize() int { return h.size }

// BlockSize returns the number of tokens per block.
func (h *Hasher) BlockSize() int { return h.cfg.BlockSize }

// Root returns vLLM's NONE_HASH, the parent of block 0: the hash of the seed
// string.
func (h *Hasher) Root() Digest { return h.root }

// AppendHashes appends to dst the 64-bit values (Digest.Value) of every full
// block of tokens, chained from Root, and returns the extended slice. Block 0
// carries extra.CacheSalt; every block carries extra.LoRA. A trailing partial
// block is not hashed, so len(tokens)/BlockSize values are appended.
func (h *Hasher) AppendHashes(dst []uint64, tokens []uint32, extra Extra) []uint64 {
	dst, _ = h.Extend(dst, h.root, true, tokens, extra)
	return dst
}

// Extend continues a chain without rehashing its prefix: it hashes every
// full block of tokens, the first with parent as its parent digest, appends
// their 64-bit values to dst, and returns the extended slice and the digest
// of the last block (parent itself when tokens holds no full block).
//
// first says whether tokens starts at block 0 of the request, the only block
// that carries extra.CacheSalt; pass parent = Root() with it. To continue
// after n blocks, pass the digest of block n-1 and first = false. The result
// of hashing a sequence in pieces at block boundaries equals AppendHashes of
// the whole.
func (h *Hasher) Extend(dst []uint64, parent Digest, first bool, tokens []uint32, extra Extra) ([]uint64, Digest) {
	bs := h.cfg.BlockSize
	n := len(tokens) / bs
	if n == 0 {
		return dst, parent
	}
	dst = slices.Grow(dst, n)
	s := h.get()
	for i := range n {
		parent = h.sum(s, h.encodeBlock(s.buf[:0], &parent, tokens[i*bs:(i+1)*bs], extra, first && i == 0, i*bs))
		dst = append(dst, parent.Value())
	}
	h.put(s)
	return dst, parent
}

// AppendDigests is Extend returning the full digest of every full block: it
// appends them to dst and returns the extended slice. The last one is the
// parent to continue the chain with.
func (h *Hasher) AppendDigests(dst []Digest, parent Digest, first bool, tokens []uint32, extra Extra) []Digest {
	bs := h.cfg.BlockSize
	n := len(tokens) / bs
	if n == 0 {
		return dst
	}
	dst = slices.Grow(dst, n)
	s := h.get()
	for i := range n {
		parent = h.sum(s, h.encodeBlock(s.buf[:0], &parent, tokens[i*bs:(i+1)*bs], extra, first && i == 0, i*bs))
		dst = append(dst, parent)
	}
	h.put(s)
	return dst
}

// Block returns the digest of one block whose tokens are exactly tokens,
// whatever their number, with the given parent digest. first says whether it
// is block 0 (the only one carrying extra.CacheSalt). It is what a verifier of
// KV events needs: an event's parent digest, one block's token ids and its
// LoRA name give the hash vLLM must have published.
func (h *Hasher) Block(parent Digest, first bool, tokens []uint32, extra Extra) Digest {
	s := h.get()
	d := h.sum(s, h.encodeBlock(s.buf[:0], &parent, tokens, extra, first, 0))
	h.put(s)
	return d
}

// encodeBlock appends the serialization of the tuple vLLM hashes for one
// block: (parent, tuple(tokens), extra keys or None).
// start is the block's first token, counted as extra.MM's offsets are.
func (h *Hasher) encodeBlock(b []byte, parent *Digest, tokens []uint32, extra Extra, first bool, start int) []byte {
	salt := ""
	if first {
		salt = extra.CacheSalt
	}
	p := parent[SHA256Size-h.size:]
	if len(extra.MM) > 0 {
		var buf [4]mmKey
		if keys := appendMMKeys(buf[:0], extra.MM, start, start+len(tokens)); len(keys) > 0 {
			if h.cbor {
				return appendCBORKeysBlock(b, p, tokens, extra.LoRA, keys, salt)
			}
			return appendPickleKeysBlock(b, p, tokens, extra.LoRA, keys, salt)
		}
	}
	if h.cbor {
		return appendCBORBlock(b, p, tokens, extra.LoRA, salt)
	}
	return appendPickleBlock(b, p, tokens, extra.LoRA, salt)
}

// encodeSeed appends the serialization of the seed string.
func (h *Hasher) encodeSeed(b []byte) []byte {
	if h.cbor {
		return appendCBORText(b, h.cfg.Seed)
	}
	return appendPickleString(b, h.cfg.Seed)
}

// sum hashes b, keeping it as s's buffer so its capacity is reused.
func (h *Hasher) sum(s *scratch, b []byte) Digest {
	s.buf = b
	if h.xxh {
		return xxhSum(b)
	}
	return sha256.Sum256(b)
}

func (h *Hasher) get() *scratch { return h.pool.Get().(*scratch) }

// put returns s to the pool unless a huge block grew it beyond reason.
func (h *Hasher) put(s *scratch) {
	if cap(s.buf) > 1<<20 {
		s.buf = make([]byte, 0, 256)
	}
	h.pool.Put(s)
}
