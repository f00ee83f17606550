// Package redisindex shares kvrouter's block index between router replicas
// through Redis 7 or Valkey 8 (index.backend: redis).
//
// # Overview
//
// An Index wraps a kvindex.Index, the local view, and a Redis client. It has
// the methods the router (Match, MatchLoad, Speculate, Settle, Charge) and
// package kvevents (AddPod, RemovePod, Stored, Removed, ClearPod) use, so
// either backend slots in behind the same consumer-declared interfaces.
// Every replica subscribes to every pod and applies every event to its local
// view: that view is what it routes on while Redis is unreachable, and what
// it copies into Redis when it becomes a pod's writer. Matches read Redis,
// so a replica started against a populated Redis routes with the whole
// fleet's index, and every replica's speculation, from its first request.
//
// One replica writes each pod's events to Redis: the holder of the pod's
// lease. Every replica writes its own decisions' speculation. A block's key
// holds 16-byte records that writers only append (APPEND, with a PEXPIREAT
// when the key's TTL is due), so no writer reads a shared key before writing
// it and none needs a script; clearing a pod gives it a new epoch in its
// namespace's pod table (one script call), after which its older records
// count for nothing. Readers fold a block's records into holders exactly as
// kvindex.Index counts its own; TestMatchAgreesWithLocalView holds a match
// through Redis to the local view's over random runs of every operation.
//
// A match is one round trip: HMGET of the candidates' pod table entries,
// HGETALL of the load table (MatchLoad, while load is shared), and one MGET
// per slot group of the blocks' keys; the count (count.go) then walks the
// blocks once, as kvindex.Index.Match does: fastest real tier first,
// speculation only where no real holder counts. The braces in the keys are
// Redis Cluster hash tags: a namespace's blocks spread over Config.Groups
// slots, so a match touches at most Groups + 1 slots, and the cluster client
// sends one pipeline per node, in parallel.
//
// On a standalone server a match's reads and the appends go through a small
// pool of plain RESP2 connections (resp.go; AUTH and TLS as configured): a
// request is written as one buffer and its replies are parsed in place, bulk
// values copied into a pooled arena, for far fewer allocations and less time
// than go-redis (see docs/performance.md). An idle connection is checked by
// a non-blocking read before use, so a server restart is not taken for an
// outage. Every other command, and every command on a cluster, goes through
// go-redis; both paths refuse the same values the same way.
//
// Besides the index the replicas share the prefill each routed to each pod
// and that is not done yet (load.go; router.LoadSharer), and the router's
// homes (homes.go). A match reads the whole load table: a field per pod and
// replica with prefill in flight, deleted at zero. Config.NoSharedLoad and
// Config.NoSharedHomes turn each off; Config.NoLocalView keeps the local
// view to the pod registry and this replica's speculation; Config.TTL 0
// gives block keys no TTL.
//
// # Keys
//
// Every key starts with Config.Prefix. n is a namespace's tag, the 64-bit
// FNV-1a hash of its base model name, and g a block's slot group, its hash
// mod Config.Groups, both in hex, as is the block's hash.
//
//	key            type    holds                       written by                TTL
//	{n:g}b:<hash>  string  the block's records, a      the pod's lease holder    Config.TTL (1)
//	                       summary first once          (events, lease copy);
//	                       compacted (see Records)     every replica (its
//	                                                   speculation); compactors
//	{n}p           hash    the pod table: "<pod>" →    the take script: a lease  none
//	                       "<num>:<epoch>:<version>"   holder's take or clear
//	                       and ":<base>" when it is
//	                       not the epoch;
//	                       "#next" → the last number
//	                       given; "#ver" → the
//	                       table's version
//	{n}l           hash    the load table: "<pod>|     each replica its own      (2)
//	                       <replica>" → "<tokens>:     fields, at each change
//	                       <requests>:<deadline ms>"   and lease tick; deleted
//	                       (load.go)                   at zero
//	{n}h           hash    the home table: "<block>"   each replica's home       (2)
//	                       → "<tokens>:<until ms>:     syncs; a full sync
//	                       <pod>"; "@<replica>" →      deletes the fields past
//	                       "<requests>:<until ms>"     their until
//	{n}s           stream  home and tail entries,      each replica's home       (2)
//	                       capped near 10,000          syncs
//	                       (homes.go)
//	lease:{<pod>}  string  the writer's Config.Replica the lease script (set     Config.LeaseTTL,
//	                                                   when free, renewed);      renewed every
//	                                                   release: deleted          LeaseTTL/3
//
// (1) A replica sets a block key's expiry (PEXPIREAT, now + Config.TTL on
// its own clock, not Config.Now) with its append only when it has not done
// so for that key within TTL/4, by a direct-mapped cache of 64Ki keys (a
// collision costs a refresh), and in a second pipeline for a key its append
// created and the cache skipped: a key lives between 3/4 of the TTL and the
// TTL after its last write. A compaction keeps the TTL. Config.TTL 0: none.
//
// (2) Config.TTL, or an hour when it is 0, from the last write; fields lapse
// at their own deadlines first.
//
// Redis's maxmemory is the hard bound. With block TTLs, set maxmemory-policy
// volatile-ttl: it evicts block keys (a block no pod seems to hold, an
// under-estimate, never a wrong route), never the pod tables, which have no
// TTL. A pod table lost all the same (an allkeys-* policy) renumbers its
// pods at their holders' next lease tick, and epochs taken from the clock
// keep old records from counting for a new number. With Config.TTL 0 a new
// block is one command, not two (see docs/performance.md), and the bound is
// maxmemory with an allkeys-* policy, allkeys-lfu best: the pod tables and
// leases, read at every match and lease tick, outlive blocks written once.
// Run checks the policy (CONFIG GET, on every master of a cluster) at start
// and whenever Redis comes back; when it does not bound the keys, or cannot
// be read, it logs it and sets kvrouter_index_redis_unbounded. A block key
// of more than Config.MaxHolders records is refused and queued for
// compaction.
//
// # Records
//
// A block key's value is a sequence of 16-byte little-endian records; a
// compacted key starts with a summary: a header record and its body.
//
//	bytes   real record                 speculative record      summary header
//	[0:4]   the pod's number (u32)      the pod's number        the body's length in records
//	[4]     the tier: 0 GPU, 1 CPU,     4                       5
//	        2 disk, 3 other
//	[5]     count delta (i8): +1        0 a speculation,        0
//	        stored, -1 removed; a       1 a settling
//	        lease copy's or compacted
//	        count, at most 127
//	[6:8]   0                           0                       0
//	[8:16]  the pod's epoch (u64)       deadline, unix ms       V: the pod table's "#ver"
//	                                                            when the compaction read it
//
// A summary's body lists the pods that hold the block once, in the GPU tier:
// their numbers ascending, each a uvarint delta from the one before (the
// first from 0), zero-padded to a whole record; about a byte a pod (64 pods:
// 80 bytes, not 1 KiB of records). A reader folds a pod's records in order
// (specState, and count for a match):
//
//	record           counts when                              effect on the pod's holder
//	real             its epoch is from the pod's base to its  adds delta to the tier's count,
//	                 current one (since its last clear)
//	                                                          never below zero
//	real GPU store   as real                                  also confirms a pending speculation
//	                                                          (it is no longer speculative)
//	speculation      deadline ≥ current epoch +               pending: this deadline, no settling
//	                 SpeculativeTTL (made after the epoch
//	                 began)
//	settling         one is pending and deadline ≥ current    the holder's deadline becomes this
//	                 epoch + SpeculativeGrace                 one if shorter
//	summary member   the pod's entry version ≤ V (no epoch    a GPU store of its current epoch
//	                 change since the summary)
//	other shapes     never                                    refused and counted; a summary of
//	                                                          no known shape ends the value
//
// A pod then holds the block in the fastest tier whose count is above zero,
// or else speculatively until its deadline. The speculative lives are the
// local view's (kvindex.Config.SpeculativeTTL, SpeculativeGrace); the epoch
// is the clearing replica's clock in ms, so another replica's clock skew
// errs by as much.
//
// Compaction keeps keys near one record per live holder. A key is queued
// when an append grows it past each multiple of 64 records, and when a match
// reads it with 16 or more GPU store records outside a summary (a block many
// pods stored once, which no append would compact), 128 records or more, or
// past the holder bound (about once per 10s per key and replica). The queue
// holds 1,024 keys and drops the rest. The compactor folds up to 64 keys a
// round in two pipelines (the namespaces' pod tables and the keys' values;
// then the scripts): one summary of the pods holding the block once on the
// GPU (when the table has a version), each other real holder with its count,
// each pending speculation (and its settling), then, unchanged, the records
// of pods the pod table it read does not cover (numbered, or given a new
// epoch, since): a new holder's. The script replaces the value it read only
// if the key still starts with it, keeping the records appended meanwhile
// and the TTL, so a hot key is compacted however busy it is.
//
// # Writers, epochs and fences
//
// The lease says which replica writes a pod's events; the pod's entry says
// which of its records count, those from its base epoch to its current one;
// the current epoch is the lease's fencing token. The take script gives a pod
// a new epoch, the larger of the old one plus one and the caller's clock in
// ms (a pod table lost and rebuilt never repeats a number and epoch), and a
// number from "#next" when it has none. A clear also moves the base to the
// new epoch and raises "#ver" the same way, recording it in the pod's entry;
// a continuing take keeps both. A clear passes the epoch it writes under,
// and the script refuses it when the table holds another. One pod, as one
// replica sees it:
//
//	state     input                                      action
//	not held  lease tick, the lease free, this replica   take: continue the pod (its entry
//	          following the pod for LeaseTTL, or the     kept, the view's differences
//	          pod without an entry                       appended: handover.go), or start it
//	                                                     afresh (no entry, or a clear seen:
//	                                                     the view copied); held
//	not held  lease tick, the lease free, this replica   wait: one that heard the pod's
//	          following the pod for less                 recent events takes it first
//	not held  lease tick, the lease this replica's       take (after an outage, or a take that
//	                                                     failed)
//	not held  lease tick, another replica's lease        learn the pod's number, which this
//	                                                     replica's speculation names it by
//	not held  event, clear                               the local view only
//	held      lease tick, ours, the pod's entry there    renewed for Config.LeaseTTL
//	held      lease tick, ours but the entry gone, or    take, as above
//	          the lease had expired and was free
//	held      lease tick, another replica's lease, or    not held
//	          the lease script failed
//	held      Stored, Removed                            append (number, tier, ±1, epoch) to
//	                                                     each block's key (queued under Run)
//	held      Stored, Removed, or a queued one sent,     not held: nothing written, counted
//	          the lease not renewed within 2/3 of        (leases_lapsed_total); the next
//	          LeaseTTL (a pause, a slow Redis)           tick takes it again if it can
//	held      ClearPod, the table has the pod's epoch    new epoch: the older records count
//	                                                     for nothing (clears_total)
//	held      ClearPod, the table has another epoch      fenced: not held, counted
//	          (another replica took the pod)             (leases_fenced_total) and logged
//	held      RemovePod, or Run ends                     release: the lease deleted if ours
//	any       a round trip fails                         Redis down: every pod not held
//
// A dead holder's lease expires and another replica takes it within LeaseTTL
// + LeaseTTL/3; a stopped one releases it, and another takes it at its next
// tick. The new holder continues the pod: the blocks stored before it
// started, which its view never heard of, stay as the old holder wrote them,
// and for every block its view holds, or saw removed since the pod's events
// may have stopped reaching Redis (LeaseTTL + LeaseTTL/3 before the last tick
// that found them written), it reads the pod's count per tier and appends
// the difference. It first sends its own queued events, or drops them if its
// lease lapsed, so that none lands after it counted. What no replica still
// running heard (a pod's events while every replica that followed it was
// gone) is lost until the pod stores the blocks again; a removal among them
// leaves the block seeming held until its key's TTL. When more of a pod's
// removals came since then than a replica keeps (4,096), or the new holder
// saw the pod cleared, it starts the pod afresh: a clear, its view copied.
// A holder whose lease was not renewed within 2/3 of LeaseTTL writes nothing
// more until a tick renews or takes it again, so a holder paused past its
// lease does not write over the replica that continued the pod (only an
// append already sent when the pause began can land late); its clears are
// fenced by the epoch. A new epoch drops the pod's speculative records
// (the local views keep theirs), an under-estimate for the seconds after a
// handover. A pod no replica has numbered gets no shared speculation.
//
// # Concurrency
//
// An Index is safe for concurrent use. The pod registry is guarded by a
// read-write lock; the up flag, and each pod's held flag and number, are
// atomics read on the hot path. Each pod's mutex serializes its events and
// clears with the copy a new lease holder makes, and guards the number and
// epoch they are written under.
//
// While Run runs, one group writer sends the appends of concurrent callers
// (the appliers of many pods, the decisions of many requests) in shared
// pipelines: it gathers what waits, up to 256 requests and until 4,096
// blocks, into one group commit. Events are queued (512 batches at most;
// past that the applier waits) in each pod's order and written in that order
// on one connection, so a pod's records reach Redis in the order of its
// events, and the applier does not wait for Redis; Flush waits for the
// events queued before it. Speculate and Settle are queued too (1,024 at
// most; past that the decision waits), in order, so a Settle lands after its
// Speculate; an event takes the speculation queued before it into its commit
// ahead of it, so that a store confirms the speculation made before it, as
// in the local view. Of one pod's speculative records on one block in one
// commit, only the last speculation and the shortest settling after it are
// written. On a standalone server a second commit goes out on the writer's
// connection, before the replies of the one in flight are read, while 128
// events or more wait; otherwise the writer waits for those replies, and the
// speculation gathered meanwhile joins one commit. On a cluster each
// commit's round trip ends before the next is gathered.
//
// The load writer publishes, in one pipeline, the pods whose count Charge
// changed, without holding up the decision; the compactor folds the keys
// queued. Matches run in parallel, each with pooled scratch and its own
// connection. The home syncs are serialized by their own mutex.
//
// # Lifecycle
//
// New validates its Config (and a TTL of at least the speculative TTL),
// makes no connection and starts no goroutines. Run starts the group writer,
// the load writer and the compactor and ticks at once: a lease tick takes
// and renews the registered pods' leases, republishes this replica's load,
// and shares the homes with the whole home table. It then ticks every
// LeaseTTL/3 while Redis is up, pings it every Config.PingInterval while it
// is down, and shares the homes every Config.HomeSync while it is up. When
// its context ends, the group writer writes the events queued (speculation
// still queued is dropped unless an event takes it along), the leases held
// are released and the clients closed; Run returns once its goroutines have
// exited. It may be called once. A caller without Run (the fleet simulator)
// calls Renew for a lease tick and SyncHomes; its appends then go out one
// call at a time, and Charge publishes at once.
//
// A failed round trip marks Redis down: kvrouter_index_redis_up 0,
// kvrouter_index_redis_errors_total by operation, and a /readyz detail (Up).
// Until a ping answers, matches read the local view, which is exactly the
// memory backend; events go only to it; speculation and load are not
// published; and the compactor drops what it takes. The first answer marks
// Redis up and goes on into a lease tick, which takes again, and so copies
// into Redis, the leases still this replica's or free. With
// Config.NoLocalView the local view holds only this replica's speculation,
// so matches meanwhile find little else, and a lease taken starts the pod
// empty in Redis. Values of the wrong type or shape are refused, counted in
// kvrouter_index_redis_refused_total by reason, and taken as no holder (a
// block key of another type reads as absent, and is counted when a writer
// meets it). RemovePod clears the pod in the local view and releases its
// lease; its Redis entries stay until their TTL or a new holder's clear.
package redisindex
