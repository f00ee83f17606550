// Package blockhash computes vLLM's prefix-cache block hashes, bit for bit.
//
// # Overview
//
// vLLM caches the KV state of a prompt in blocks of BlockSize tokens and names
// every full block by a hash chained over the whole prefix: block i hashes the
// tuple (digest of block i-1, the block's token ids, extra keys), and block 0
// chains from NONE_HASH, the hash of the PYTHONHASHSEED string. The extra keys
// are the LoRA adapter name (every block) and the request's cache_salt
// (block 0 only). KV events publish the last 8 bytes of each digest as a
// 64-bit integer; Digest.Value computes the same integer, and that integer is
// the key of kvrouter's index.
//
// A Hasher reproduces the chain for one Config: the algorithm (SHA256, which
// hashes Python's pickle protocol 5 and is vLLM's default, SHA256CBOR,
// canonical CBOR, or XXHash and XXHashCBOR, the same bytes hashed with
// xxh3_128 into 16-byte digests), the seed string and the block size, all of
// which must equal the pods' settings. Hasher.AppendHashes hashes a request's tokens from the
// root; Hasher.Extend and Hasher.AppendDigests continue a chain from a known
// parent digest without rehashing the prefix; Hasher.Block hashes one block,
// as a verifier of KV events needs. The pickle and CBOR bytes come from small
// hand-written encoders (pickle.go, cbor.go) that are tested byte for byte
// against Python's pickle and cbor2 and against fxamacker/cbor; the digests
// against Python's hashlib and xxhash.
//
// # Concurrency
//
// A Hasher is immutable after NewHasher and safe for concurrent use: one
// Hasher per configuration is shared by every request. Each call borrows an
// encoding buffer from a sync.Pool, so hashing allocates nothing in steady
// state beyond growing the caller's slice.
//
// # Lifecycle
//
// NewHasher validates its Config, computes the root digest once and starts no
// goroutines; a Hasher needs no closing. When a pod's hash settings change,
// build a new Hasher: hashes from different configurations never match each
// other.
package blockhash
