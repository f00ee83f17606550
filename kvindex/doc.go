// Package kvindex computes vLLM's prefix-cache block hashes and keeps the index
// from block hash to the pods (and cache tiers) that hold the block.
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
// the index key.
//
// A Hasher reproduces the chain bit for bit for one HashConfig: the algorithm
// (SHA256, which hashes Python's pickle protocol 5 and is vLLM's default, or
// SHA256CBOR, canonical CBOR), the seed string and the block size, all of which
// must equal the pods' settings. Hasher.AppendHashes hashes a request's tokens
// from the root; Hasher.Extend and Hasher.AppendDigests continue a chain from a
// known parent digest without rehashing the prefix; Hasher.Block hashes one
// block, as a verifier of KV events needs. The pickle and CBOR bytes come from
// small hand-written encoders (pickle.go, cbor.go) that are tested
// byte-for-byte against Python's pickle and cbor2 and fxamacker/cbor.
//
// An Index maps each 64-bit block hash to its holders: the pods, and the
// cache tier on each pod (GPU, CPU, disk), that store the block, with a count
// per holder because vLLM may store one hash twice on a pod. KV events feed
// it (Index.Stored, Index.Removed, Index.ClearPod, Index.ClearTier); a
// routing decision adds speculative holders (Index.Speculate) that count
// until the pod's own event confirms them, while the request waits for its
// prefill (at most Config.SpeculativeTTL) and for Config.SpeculativeGrace
// after it (Index.Settle); and
// Index.Match reports, per candidate pod, the longest run of leading blocks
// it holds and in which tiers. Pods are registered with the base model they
// serve (Index.AddPod): vLLM's hashes do not include the model, so a match
// only ever counts pods of the request's model.
//
// The index is split into shards by hash. In a shard every block hash has a
// node in an open-addressing table, and the node's holders sit side by side
// in a power-of-two vector, so a match reads one short run of memory per
// block. Holders are 20 bytes, linked on per-pod lists so that clearing a pod
// costs only its own entries and so that, when the index reaches
// Config.MaxEntries, the least recently stored entry of the shard is evicted
// first. Nodes and holders live in chunked arrays addressed by 32-bit
// references: the garbage collector never scans them.
//
// # Concurrency
//
// A Hasher is immutable after NewHasher and safe for concurrent use: one
// Hasher per configuration is shared by every request. Each call borrows an
// encoding buffer from a sync.Pool, so hashing allocates nothing in steady
// state beyond growing the caller's slice.
//
// An Index is safe for concurrent use. Each shard has a read-write lock:
// writers (events, speculation, clears) lock one shard per block; a match
// read-locks every shard its blocks fall in, in shard order, once, and
// holds them while it walks. Matches run in parallel with each other. The
// pod table has its own lock, taken briefly by every operation to check the
// PodID handle.
//
// # Lifecycle
//
// NewHasher validates its HashConfig, computes the root digest once and
// starts no goroutines; a Hasher needs no closing. When a pod's hash settings
// change, build a new Hasher: hashes from different configurations never
// match each other.
//
// New validates its Config and starts no goroutines either. Expired
// speculative entries are freed as their pod's shards are written; a caller
// with a quiet index may call Index.Sweep now and then. RemovePod clears a
// pod's entries and frees its small index for reuse; the handle's
// generation makes any stale PodID fail with ErrUnknownPod.
package kvindex
