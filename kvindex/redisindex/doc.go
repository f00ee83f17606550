// Package redisindex shares kvrouter's block index between router replicas
// through Redis 7 or Valkey 8 (index.backend: redis).
//
// # Overview
//
// An Index wraps a kvindex.Index, the local view, and a Redis client. It
// offers the methods the router (Match, Speculate, Settle) and package
// kvevents (AddPod, RemovePod, Stored, Removed, ClearPod) use, so either
// backend slots in behind the same consumer-declared interfaces. Every
// replica keeps subscribing to every pod and keeps its local view: that is
// what it routes on while Redis is unreachable, and what a new lease holder
// copies into Redis. Matches read Redis, so a replica started against a
// populated Redis routes with the whole fleet's index from its first request,
// and sees the other replicas' speculation.
//
// # Data model
//
// Keys start with Config.Prefix. The base model (the index namespace) is
// folded into a 64-bit FNV-1a tag n, written in hex:
//
//	<prefix>{<n>:<g>}b:<hash>   a hash per block; g = hash mod Config.Groups
//	    "<tier>:<epoch>:<pod>" → count     a real holder
//	    "s:<pod>"             → deadline  a speculative holder (unix ms)
//	<prefix>{<n>}e              a hash per namespace
//	    "<pod>:<tier>"        → epoch     the pod's current epoch per tier
//	<prefix>lease:{<pod>}       the pod's writer lease: the holder's id
//
// The braces are Redis Cluster hash tags: a namespace's blocks spread over
// Config.Groups slots, and one request's lookups touch at most Groups + 1
// slots, so the cluster client sends one pipeline per node, in parallel.
// A Match is one pipeline: HGETALL of the namespace's epochs and of every
// block key, then the leading runs are counted here exactly as
// kvindex.Index.Match counts them (fastest real tier first, speculation
// only where no real holder counts). An event batch is one pipeline: per
// block one HINCRBY and one PEXPIRE (a store) or one script call (a
// removal: decrement, delete at zero).
//
// Clearing a pod (an AllBlocksCleared event, a restart, a gap replay cannot
// fill, a new lease holder) does not walk its entries: it increments the
// pod's epochs, one command. Fields of older epochs no longer count and
// leave with their key's TTL.
//
// # Bounds
//
// Every write sets its block key's TTL to Config.TTL: a block nobody
// stores again for that long leaves Redis on its own, which bounds the
// entries by what the fleet stored in one TTL. Set Redis's maxmemory with
// maxmemory-policy volatile-ttl (or allkeys-lru) as the hard bound: an
// evicted key is a block no pod seems to hold, an under-estimate, never a
// wrong route. A block key holds at most Config.MaxHolders holders of the
// current epochs (the holder bound): matches ignore keys beyond it and
// count them refused. Speculative holders carry their own deadline
// (kvindex.Config.SpeculativeTTL, shortened to SpeculativeGrace by Settle)
// and count only before it.
//
// # Writers
//
// Exactly one replica writes a pod's events: the holder of its lease, a
// key set with SET NX PX Config.LeaseTTL and renewed every LeaseTTL/3 by a
// compare-and-extend script. When the holder dies its lease expires and
// another replica takes it within LeaseTTL + LeaseTTL/3. A new holder
// increments the pod's epochs (a clear, counted) and copies its local view
// of the pod into Redis, so events the old holder had not written yet are
// not lost and nothing it wrote stale survives. Speculation has no
// owner: every replica writes its own decisions' speculative holders.
//
// # Degradation
//
// A failed round trip marks Redis down (kvrouter_index_redis_up = 0,
// kvrouter_index_redis_errors_total, a /readyz detail) and from then on
// Match reads the local view, which is exactly the memory backend, and
// writes go only to it. Run pings Redis every Config.PingInterval; the
// first answer marks it up again, and the lease loop re-takes (and so
// re-copies) every lease it holds. Values of the wrong type or shape in
// Redis are refused: counted in kvrouter_index_redis_refused_total and
// taken as no holder.
//
// # Concurrency
//
// An Index is safe for concurrent use. The pod table is guarded by a
// read-write lock; the up flag and the leases held are atomics read on
// the hot path.
//
// # Lifecycle
//
// New validates its Config and starts no goroutines. Run keeps the leases
// and the health check until its context ends, then releases the leases it
// holds, and returns once its goroutines have exited.
package redisindex
