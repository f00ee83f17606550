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
//	<prefix>{<n>:<g>}b:<hash>   a string per block, g = hash mod Config.Groups:
//	                            16-byte records, appended (see below)
//	<prefix>{<n>}p              the namespace's pod table, a hash:
//	    "<pod>"  → "<num>:<epoch>:<version>"   the pod's number, its
//	                                 current epoch, and the table's version
//	                                 when it began
//	    "#next"  → the last number given
//	    "#ver"   → the table's version, raised at every epoch change
//	<prefix>{<n>}l              the namespace's load table, a hash:
//	    "<pod>|<replica>" → "<tokens>:<requests>:<deadline ms>"
//	                            the prefill the replica routed to the pod,
//	                            not done yet (see Load below)
//	<prefix>{<n>}h, {<n>}s      the namespace's home table and stream: the
//	                            router's homes, shared (homes.go)
//	<prefix>lease:{<pod>}       the pod's writer lease: the holder's id
//
// A record is (pod number u32, kind u8: tier 0–3 or speculative, count
// delta i8, 2 zero bytes, epoch or deadline u64), little-endian. Every
// write is an APPEND (with a PEXPIREAT when the key's TTL is due, below),
// so writers of different pods never read-modify-write a shared key and
// need no script: a BlockStored of 16 blocks is one pipeline of 16 to 32
// commands, a speculation of a 512-block prompt one of 512 to 1024. Readers
// fold a pod's real records of its current epoch in order, the count never
// below zero (a removal of an absent block is ignored, as kvindex ignores
// it), and its speculative records to what kvindex's own speculative holder
// would be: a speculation sets the deadline, a settling (flagged) only
// shortens a pending one, the pod's GPU store confirms it, and one written
// before the pod's current epoch (its deadline less its life, before the
// epoch, the clearing replica's clock) is from before a clear and counts
// for nothing. TestMatchAgreesWithLocalView holds a match through Redis to
// the local view's over random runs of every operation.
//
// A Match is one pipeline: HMGET of the candidates' pod table entries
// (and, for the router's MatchLoad, HGETALL of the load table), and one
// MGET per slot group of the blocks' keys; then the leading runs are
// counted here exactly as kvindex.Index.Match counts them (fastest real
// tier first, speculation only where no real holder counts), in one pass
// per block over the records of the candidates still running. The
// candidates are bits: a block's summary members and first GPU stores only
// set a bit, a summary like the block before's (the blocks of a prefix the
// same pods hold) reuses its bits, and only a candidate a block names
// otherwise has its records folded one by one. Only bytes
// cross the wire: no per-holder strings to parse. The braces are Redis
// Cluster hash tags: a namespace's blocks spread over Config.Groups slots,
// so one request touches at most Groups + 1 slots and the cluster client
// sends one pipeline per node, in parallel.
//
// On a standalone server the two hot paths, a match's reads and the
// appends, do not go through go-redis: a small pool of plain RESP2
// connections (resp.go, AUTH and TLS as configured) writes each request
// as one buffer and parses the replies in place, bulk values copied into
// a pooled arena. A match allocates 7 times, not 2,159, and takes a third
// of the time (BenchmarkMatch512). An idle connection the server closed (a
// restart) is found by a non-blocking read before use, not by a failed
// match. The cluster client keeps go-redis, which routes by slot; both
// paths refuse the same values the same way.
//
// Clearing a pod (an AllBlocksCleared event, a restart, a gap replay cannot
// fill, a new lease holder) does not walk its entries: it gives the pod a
// new epoch in the pod table, one script call. Records of older epochs no
// longer count. A key that appends grow past each multiple of 64 records
// is compacted in the background: read, folded to one record per live
// holder (records of an epoch newer than the pod table it read kept as
// they are: a new holder's), and written back by a script that keeps the records appended
// meanwhile after the folded ones, so a hot key (a shared system prompt's,
// appended to by every decision's speculation) stays short however busy.
// The compactor takes up to 64 queued keys a round, in two pipelines (their
// pod tables and values, then the scripts): one at a time, at three round
// trips each, it fell behind a long prompt whose every block each decision
// grows, and keys it dropped grew to the holder bound.
// A match queues the keys it reads with 16 GPU store records or more outside a
// summary too (compactRead): a block 40 pods stored once is 40 records
// that no append would compact; and the keys it reads 128 records long or
// longer, or past the holder bound (compactLong): their compactions were
// dropped while appends grew them.
// The holders that hold the block once in the GPU tier, most of them, fold
// into one summary: the table version the compaction read and their
// numbers as varint deltas, about a byte each (64 holders: 80 bytes, not
// 1 KiB). A member counts while its pod's entry has the version it had
// then or older; an epoch change raises it, and the member counts for
// nothing, as its records would (kindSummary).
//
// # Bounds
//
// Block keys carry Config.TTL: a block nobody writes again for that long
// leaves Redis on its own, which bounds the entries by what the fleet
// stored in one TTL. A replica refreshes a key's TTL (PEXPIREAT, which
// Redis does not rewrite for propagation as it does PEXPIRE) with its
// append only when it has not refreshed that key in the last TTL/4 (a
// direct-mapped cache of 64Ki keys; a collision costs a refresh), so a key
// lives between 3/4 of the TTL and the TTL after its last write; a hot
// key, appended to by every decision's speculation, is refreshed once per
// TTL/4 instead of at each append. A key an append creates always gets its
// TTL: in the same pipeline, or in a second one when the cache skipped it.
// The TTL deadlines are the replica's clock, not Config.Now. Set Redis's maxmemory with
// maxmemory-policy volatile-ttl as the hard bound: an evicted block key is
// a block no pod seems to hold, an under-estimate, never a wrong route. The
// pod tables have no TTL, so volatile-ttl never evicts them (with
// allkeys-* policies a lost pod table renumbers its pods at the holders'
// next lease tick, which finds their entries gone; epochs taken from the
// clock keep old records from counting for a new number).
//
// Config.TTL 0 gives block keys no TTL: a new block is one APPEND, not an
// APPEND and a PEXPIREAT, about half of Redis's time per new block
// (BenchmarkStored16Pods). The bound is then maxmemory with an allkeys-*
// policy, allkeys-lfu best: the pod tables and leases, read at every
// match and lease tick, outlive the blocks written once. Run checks the
// policy (CONFIG GET, on every master of a cluster) at start and whenever
// Redis comes back, and logs an error and sets
// kvrouter_index_redis_unbounded when maxmemory or the policy does not
// bound the keys. The load tables keep an hour's TTL.
//
// A block key longer than Config.MaxHolders records (the holder bound) is
// refused.
// Speculative records carry their deadline (kvindex.Config.SpeculativeTTL,
// shortened to SpeculativeGrace by Settle) and count only before it.
//
// # Load
//
// The router charges each decision's prefill (uncached prompt tokens
// weighed by their context, and one request) to its pod until the pod
// starts answering (router.LoadSharer: Charge, MatchLoad). Each replica
// counts its own per pod and publishes the count in the namespace's load
// table: at each change (through Run's load writer, which writes the pods
// that changed in one pipeline without holding up the decision; at once
// without Run), deleted at zero, and renewed at each lease tick while not
// zero. A field counts until its deadline, twice Config.LeaseTTL after its
// last write, so a dead replica's load lapses in that time. A match reads
// the table in its round trip and reports the other replicas' fields by
// candidate; the router adds them to its own (router/score.go queue).
// Without it every replica sees a new prefix's speculation on one pod and
// sends its share of the burst there while each counts only its own
// requests queued on it (test/fleetsim BenchmarkReplicas). Config.
// NoSharedLoad (index.redis.share_load: false) turns it off. A match reads
// the whole table: one field per pod with prefill in flight and replica
// that routed it (64 pods and 4 replicas: at most 256 fields, about 10 KB),
// so a fleet of thousands of pods busy at once pays for it on every
// decision; fields at zero are deleted, not kept. A load table
// of the wrong type or a field of the wrong shape is refused and counted
// (reason load) and counts as no load.
//
// # Writers
//
// Exactly one replica writes a pod's events: the holder of its lease, a
// key set with SET NX PX Config.LeaseTTL and renewed every LeaseTTL/3 by a
// compare-and-extend script. When the holder dies its lease expires and
// another replica takes it within LeaseTTL + LeaseTTL/3. A new holder
// gives the pod a new epoch (a clear, counted) and copies its local view
// of the pod into Redis, so events the old holder had not written yet are
// not lost and nothing it wrote stale survives. The new epoch drops the
// pod's speculative records too, as a clear does (the local views keep
// theirs): for the seconds after a handover the replicas see less
// speculation on the pod than they made, an under-estimate. The epoch is the lease's
// fencing token: an old holder that has not noticed yet (paused past the
// lease TTL) writes records of its old epoch, which count for nothing, and
// its clears, which pass the epoch they write under, are refused by the
// script (kvrouter_index_redis_leases_fenced_total) and stop its writing. Speculation has no
// owner: every replica writes its own decisions' speculative records,
// naming the pod by the number its lease holder gave it (learnt at each
// lease renewal; a pod not yet numbered gets no shared speculation).
//
// # Degradation
//
// A failed round trip marks Redis down (kvrouter_index_redis_up = 0,
// kvrouter_index_redis_errors_total, a /readyz detail) and from then on
// Match reads the local view, which is exactly the memory backend, and
// writes go only to it. Run pings Redis every Config.PingInterval; the
// first answer marks it up again, and the lease loop re-takes (and so
// re-copies) every lease it holds. With Config.NoLocalView
// (index.redis.local_view: false) there is no local view to fall back on:
// matches find nothing meanwhile, so decisions go by load alone, and a
// lease taken starts the pod empty in Redis. Values of the wrong type or
// shape in Redis are refused: counted in kvrouter_index_redis_refused_total and
// taken as no holder (a block key of another type reads as absent and is
// counted when a writer meets it).
//
// # Concurrency
//
// An Index is safe for concurrent use. The pod table is guarded by a
// read-write lock; the up flag and the leases held are atomics read on
// the hot path; each pod's writes are serialized with the copy a new lease
// holder makes by the pod's own mutex. While Run runs, the appends of
// concurrent callers (the appliers of many pods, the decisions of many
// requests) share one pipeline, a group commit of at most 4,096 blocks;
// while 128 or more events wait, the group writer sends the next commit
// on its connection to a standalone server before the replies of the one
// in flight are read. An event's caller does not wait for
// Redis: its appends are queued (512 batches at most; past that the
// applier waits) in the pod's order and written in that order on one
// connection, so a pod's records reach Redis in the order of its events;
// Flush waits for those queued before it. A write that fails marks Redis
// down, and the lease, taken again once it is back, copies the local
// view in. When Run ends, what is queued is written before it returns. A
// decision's Speculate and Settle do not wait either: they are queued (in
// order, so a Settle lands after its Speculate) and written by the group
// writer; speculation still queued when Run ends is dropped. Of a pod's
// speculative records on one block in one group commit only those that
// count are written, its last speculation and the shortest settling
// after: a burst of decisions on one prompt writes each block at most
// twice per commit.
//
// # Lifecycle
//
// New validates its Config, makes no connection and starts no goroutines.
// Run keeps the leases and the health check, and runs the group writer,
// the load writer and the compactor, until its context ends; then it releases the leases it
// holds, closes the client, and returns once its goroutines have exited.
// A caller without Run (the fleet simulator) calls Renew to take the
// leases; its appends then go out one call at a time.
package redisindex
