// Package kvevents keeps the KV index current from the KV-cache events every
// vLLM pod publishes over ZeroMQ: one subscriber per pod, sequence tracking
// with replay on gaps, reconnects, and applying each decoded batch (package
// wire decodes them) to the index. Package discovery finds the pods.
//
// # Overview
//
// A vLLM pod started with --kv-events-config publishes one msgpack batch per
// scheduler step on a PUB socket (tcp://*:5557, DP rank k on 5557+k) as the
// three frames [topic, seq, payload], seq being an 8-byte big-endian counter
// from 0 per process, and serves the last buffer_steps batches on a replay
// ROUTER (:5558+k). A wire.Decoder turns a payload into a wire.Batch of
// events.
//
// A Manager follows the pods it is told about (Ensure, Remove) with one
// Subscriber each. A subscriber has one stream per DP rank. At each
// (re)connection the stream finds where its rank publishes: a pod with no
// event ports configured (every pod, with Config.Sources "always") is
// asked GET /kv_event_sources on its API server, which answers each rank's
// endpoints as bound (ephemeral ports too; sources.go); a pod that serves
// no such route, or does not answer, is followed on its configured or
// default ports, and an answer kvrouter cannot use follows nothing for
// that pod. The stream connects a SUB socket and tracks the rank's
// sequence: a gap is filled by asking the
// replay ROUTER through a DEALER ([b"", start_seq], answered by [b"", seq,
// payload] or [b"", topic, seq, payload] frames and an end marker of seq
// -1); a gap older than the replay buffer clears the pod's entries. Every
// (re)connection replays from the last batch taken, which the same process
// returns unchanged: another batch there, none, or a live sequence that
// goes backwards means the pod restarted, and its entries are cleared and
// the new process replayed from 0. An idle connection replays once more
// after connecting, for batches published while its subscription was on
// its way. The SUB socket is read in runs: every batch waiting is taken in
// two calls into libzmq. When a read finds 64 batches or more, the stream
// waits Config.BatchWindow (1ms) before the next, so that a pod publishing
// faster than one read per batch is read, and applied, in long runs. Batches reach the index through a bounded queue; a
// full queue drops the live batch (counted) and the gap is replayed. Data-parallel
// ranks share the pod's index handle (the router picks pods, not ranks), so
// a restart or an AllBlocksCleared seen on one rank clears the whole pod; a
// block held by two ranks is counted twice and survives one removal. The applier maps
// BlockStored and BlockRemoved to kvindex Stored and Removed in the tier of
// their medium, AllBlocksCleared to ClearPod, and counts BlockStored events
// whose token_ids do not hold block_size tokens per hash (applied by hash
// all the same). Of a model's KV-cache groups it applies those that
// reuse a prefix as full attention does (full_attention, mla_attention,
// sink_full_attention, or events naming no kind) under the block hashes,
// and sliding-window and Mamba groups under kvindex.GroupKey of the hash
// and the group's index, unverified; groups.go cites vLLM's managers. It
// learns each group's kind from its BlockStored events, applies a
// BlockRemoved to the group its group_idx names, and gives the index the
// pod's layout of groups (GroupIndex), by which a match is priced. The
// other groups' events, and removals in a group not yet named, are
// counted by kind and change nothing.
//
// Pods of SGLang and TensorRT-LLM (pod.Pod.Engine, Config.DefaultEngine)
// publish batches of the same shapes but name blocks by ids of their own:
// their blocks are always rekeyed (below) and never verified, a block of a
// multiple of kvrouter's block size cut into kvrouter's blocks.
//
// It also verifies the pods' hash configuration: it recomputes, from the
// events' own token ids, LoRA names and extra keys, the hashes of chains that
// start at the root, continue a chain it verified, or come with their
// parent's raw digest, and compares them with the published ones. A pod is
// "verified" once a chain matches in the window of recent checks and
// "mismatch" when chains keep failing and none matches (a cache_salt is
// invisible in older events, so one failure proves nothing); each change is
// logged once, naming --prefix-caching-hash-algo and PYTHONHASHSEED. Once
// verified, one event in Config.VerifySample is checked. When the pod's
// entries are cleared because its publisher restarted, its verification
// starts over from "unknown": the new process may hash with another seed.
//
// A pod whose hashes mismatch is rekeyed, so requests match it again: its
// index entries become kvrouter's own hashes of the token ids its
// BlockStored events carry, chained from kvrouter's root (a chain from the
// root) or from the rehashed digest of the event's parent. A map from the
// pod's hashes to kvrouter's digests, bounded to the last Config.RekeyBlocks
// blocks stored or used as a parent, resolves those parents and the
// BlockRemoved events; until the pod is verified the map is kept beside the
// pod's own entries, so that the blocks stored before the mismatch was
// concluded are rekeyed at that moment, and a verified pod keeps none.
// What cannot be rekeyed is skipped and counted by reason: blocks whose
// extra keys the event names but kvrouter cannot reproduce (multimodal
// inputs, prompt embeddings) and those after them, a parent missing from
// the map, events without token ids or of another block size, and removals
// the map cannot resolve. A cache_salt that an older event does not spell
// out cannot be seen: such a block is rekeyed as unsalted. Rekeying also
// covers a hash algorithm kvrouter does not reproduce, which fails
// verification like another seed. Status reports a rekeyed pod.
//
// Metrics are named kvrouter_kvevents_*; per-pod series are deleted when the
// pod is removed.
//
// # Sequence state machine
//
// A stream is unstarted (nothing taken, no replay from 0 completed),
// expecting n (the next batch), or probing (after a reconnection, its
// replay from n-1 shows whether the publisher is the same process). What
// each input does; "restart" counts it, logs it once, clears the pod's
// entries, starts hash verification over and replays the new process from
// 0 (expecting 0, then what the replay gives); "exhausted" counts it and
// clears the pod's entries if it holds any, then takes the batch.
//
//	state         input                                  action
//	unstarted     connection up                          replay from 0
//	unstarted     first batch s (replayed, or live when  take it, expect s+1
//	              the replay failed)
//	unstarted     replay from 0 ends with no batch       expect 0
//	expecting n   batch n                                take it, expect n+1
//	expecting n   batch below n, replayed, or live from  skip: already taken
//	              the connection's replay overlap
//	expecting n   live batch s > n (first batch lost     gap: count it, replay from n
//	              after an empty replay included)
//	expecting n   the gap's replay ends exactly at s-1   take the live batch s
//	expecting n   the gap's replay ends before s-1, or   exhausted: the gap is older
//	              a replay's first batch is after n      than the replay buffer
//	expecting n   replay with replies missing inside     ask again from the hole, 3 times
//	expecting n   live batch below the connection's      restart: the sequence went
//	              replay start, or not after the         backwards
//	              connection's previous live batch
//	expecting n   connection idle after connecting, or   replay from n once
//	              after a live batch dropped for a full
//	              queue
//	expecting n   connection lost (a replay in flight    backoff, then reconnect
//	              ends at once: the publisher is gone)
//	expecting 0   reconnect                              replay from 0
//	expecting n   reconnect, n > 0                       probing: replay from n-1
//	probing       batch n-1, as taken                    same process: the rest of the
//	                                                     replay as expecting n
//	probing       batch n-1 but another payload, or the  restart: the replay was answered
//	              replay ends with no batch at all       by a restarted publisher
//	probing       first batch after n-1 (it left the     as expecting n: take batch n,
//	              replay buffer)                         exhausted for a later one
//
// # Concurrency
//
// Ensure, Remove and Status may be called from any goroutine. Each stream
// runs in its own goroutine, which alone creates, uses and closes its ZMQ
// sockets (SUB, its monitor, and a DEALER per replay); libzmq sockets are not
// safe for concurrent use. Each subscriber has one applier goroutine that
// owns its Decoder and hash verifier, so a pod's batches are applied in
// order while pods proceed in parallel.
//
// # Lifecycle
//
// NewManager validates its Config and registers its metrics; it starts
// nothing. Run starts and stops subscribers as Ensure and Remove ask, until
// its context is done; it then cancels every subscriber and returns once all
// their goroutines have exited and their sockets are closed. A stream whose
// connection is refused or lost holds no socket while it waits a jittered
// exponential backoff (Config.BackoffMin to BackoffMax, on Config.Clock), so
// an absent pod costs no CPU. Removing a pod, or changing its address, ports,
// model or DP size, retires its index handle, which clears its entries.
package kvevents
