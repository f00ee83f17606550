// Package fleetsim is a discrete-event simulation of a fleet of vLLM pods
// behind a router, to measure routing policies' time to first token,
// throughput and prefix-cache hits on real and published workloads without
// GPUs.
//
// # Overview
//
// Each pod has a GPU KV cache of Config.Blocks blocks of Config.BlockSize
// tokens with vLLM's semantics (cache.go): only full blocks are hashed and
// cached; a request's leading cached blocks are shared and skip their
// prefill; blocks of finished requests stay cached on a free queue and are
// evicted least recently used first, a request's tail before its head. A
// pod schedules like vLLM's V1 scheduler (pod.go): continuous batching,
// running requests first, chunked prefill within a token budget per step,
// preemption by recomputation when blocks run out. A step's duration comes
// from the cost model in Config (prefill throughput with an attention
// surcharge that grows with context, decode step overhead and KV reads).
// Every step's stored and evicted block hashes are delivered, after
// Config.EventDelay, to whatever listens for KV events (the real kvindex in
// the kvrouter policy).
//
// A fleet may disaggregate prefill and decode (pd.go, Config.Roles), as
// llm-d runs vLLM with its NIXL connector: a request the router gives a
// prefill pod is computed there like any prompt (prefix cache, chunked
// prefill, KV events), then its decode pod allocates the blocks it lacks,
// pulls their KV over the link in Config.KVLinkLatency + tokens ×
// KVBytesPerToken / KVLinkBandwidth, caches and publishes those blocks,
// computes the prompt's last token and decodes; time to first token runs
// to that token. A request routed without a prefill pod is computed by its
// pod, whatever its role. Only the kvrouter policy routes such a fleet: it
// takes the prefill pod from the real router's decision, which hops only
// when the decode pod lacks Config.PDThresholdTokens tokens of the prompt.
//
// Policies (policy.go, kvrouter.go) pick a pod per request: random,
// round-robin, least-loaded on scraped queue and KV use, an approximate
// prefix scorer that learns only from its own decisions, kvrouter's real
// router over the real kvindex, and an oracle that reads every pod's cache
// and queue. Workloads (workload.go) are the Mooncake traces and the llm-d
// shared-prefix benchmark. A Client (client.go) sends them: open loop at
// each request's arrival time, or as a benchmark tool does, with bounded
// concurrency (a request's wait in the client is not part of its time to
// first token), a request timeout that aborts the request on its pod, and
// stages that start only once the previous one has drained. Run returns
// per-request results that Summarize turns into per-level percentiles of
// time to first token, inter-token latency and throughput.
//
// # Concurrency
//
// A Sim is single-goroutine and deterministic: the same workload, policy
// and seed give identical results. Independent Sims may run in parallel;
// a Workload is read-only once built and may be shared.
//
// # Lifecycle
//
// Build a Workload, then call Run with a Config and a policy constructor;
// Run returns when every request has finished or timed out.
package fleetsim
