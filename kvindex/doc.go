// Package kvindex keeps the index from vLLM's prefix-cache block hashes to the
// pods (and cache tiers) that hold each block.
//
// # Overview
//
// vLLM names every full block of a prompt by a 64-bit hash chained over the
// whole prefix (package blockhash computes it). KV events publish those
// integers, and they are the index's keys.
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
// A hybrid model's pods (sliding-window or Mamba layers beside full
// attention) hold each KV-cache group's blocks under keys of their own
// (GroupKey), and their layout (Index.SetGroups) has Match report the
// prefix every group serves, as vLLM's coordinator finds it (groups.go).
//
// The index is split into shards by hash. In a shard every block hash has a
// node in an open-addressing table, and the node's holders sit side by side
// in a power-of-two vector, so a match reads one short run of memory per
// block. Holders are 20 bytes, linked on per-pod lists so that clearing a pod
// costs only its own entries and so that, when the index reaches
// Config.MaxEntries, the least recently stored entry of the shard is evicted
// first. Nodes and holders live in chunked arrays addressed by 32-bit
// references: the garbage collector never scans them. An index larger than
// the processor's caches misses to memory on each block's first table slot,
// so batches and matches prefetch the slots of the blocks ahead of the one
// they work on (prefetch.go), and those misses overlap.
//
// # Concurrency
//
// An Index is safe for concurrent use. Each shard has a read-write lock:
// writers (events, speculation, clears) lock the shard of each block, a
// batch of at least two blocks per shard on average each shard once; a match
// read-locks every shard its blocks fall in, in shard order, once, and
// holds them while it walks. Matches run in parallel with each other. The
// pod table has its own lock, taken briefly by every operation to check the
// PodID handle.
//
// # Lifecycle
//
// New validates its Config and starts no goroutines. Expired
// speculative entries are freed as their pod's shards are written; a caller
// with a quiet index may call Index.Sweep now and then. RemovePod clears a
// pod's entries and frees its small index for reuse; the handle's
// generation makes any stale PodID fail with ErrUnknownPod.
package kvindex
