package main

// setupText explains the model and how each parameter was derived; the
// report's figures follow it.
const setupText = `Discrete-event simulation (test/fleetsim) of vLLM pods: Llama-3.1-8B on one
H100 cost model (prefill 25k tokens/s, +1.83e-5 per token of context for
attention; steps of 5.5 ms + 6 µs per decoding sequence + Σ context × 128 KiB
/ 2.3 TB/s; chunked prefill in 8,192-token steps; up to 256 running), vLLM's
prefix cache (full blocks of 16 hashed with vLLM's hash; freed blocks cached
until evicted LRU, tail first; preemption by recomputation), KV events to the
router 50 ms after each step, metrics scraped every 100 ms. kvrouter is the
real router package (Router.Route) over the real kvindex, with the default
config except PrefillSecondsPerToken = 1/25,000 (the pods' speed): its
speculative index entries live while their request waits for prefill (at
most 60 s) and 2 s after its first token (Decision.Prefilled, as extproc
calls it on the first response byte). The oracle reads every pod's cache,
queue and decode batch exactly and scores like kvrouter.

Scaling (so that the whole matrix runs in minutes on 2 cores):

- (b) llm-d shared prefix: 4 pods instead of 8 and 75 groups instead of 150, so
  the working set is still 73% of the fleet's KV capacity (pods of 19,263
  blocks, as the published pods' 307,328 tokens); the published 1,000 output
  tokens; stage rates × 0.58 (sim QPS = 0.58 × published QPS), the ratio of
  the two fleets' decode capacity: with 1,000-token outputs at ~7.7k context
  a step's KV reads dominate, 0.45 ms per running sequence on both pods
  (128 KiB per token per GPU at 2.3 TB/s: Llama-3.1-8B on one H100 here,
  Qwen3-32B's 256 KiB split over TP2 there), plus 5.5 ms here and ~14 ms
  there (32.8 GB of weights per GPU); with equal KV capacity both run ~110
  sequences, so a simulated pod decodes ~1.16× as fast and 4 of them offer
  0.58× the published fleet's capacity.
- (c) overload: the same fleet, stages and client with groups raised until
  the working set is 1.25× the fleet's KV capacity.
- (a) Mooncake: 8 pods of 28,000 blocks, the first 20 minutes of each trace,
  arrivals compressed 1×, 2× and 3×, sent open loop at the trace's times (a
  trace replay, as in the Mooncake paper).
- Approximate prefix: per-pod LRU of 31,250 × blocks/19,208 (the GIE default
  scaled to the simulated pod), 256 leading blocks matched, weights prefix 1,
  queue 1, KV use 1 (the published run's "estimated" scheduler, the
  inference gateway's default). Least-loaded: queue + KV use, weights 1
  and 1 (the published "load" scheduler).
- Hit ratio: prompt blocks found cached when the request was first admitted,
  over full prompt blocks. Global-LRU bound: the same requests replayed in
  arrival order through one LRU of the whole fleet's blocks (no concurrency).
- Output tok/s of a level: its finished requests' output tokens over the time
  from the level's start to its last request's end (inference-perf's
  window). "all" pools every level from the run's start.

The load generator of (b) and (c) is inference-perf as the published run
used it (its load configuration sets only type poisson and the stages; the
rest are the defaults of the September 2025 release the run used):

- Stages: the published rates and durations — warm-up 15 QPS × 50 s, then
  3, 10 and 15 QPS × 20 s, 20 × 38, 22 × 34, 25 × 30, 30 × 25, 35 × 21,
  40 × 38, 43 × 36, 46 × 33, 49 × 30, 52 × 29, 55 × 27, 57 × 26 and
  60 × 25 s: about 750 requests (one pass over the 750 prompts) per stage
  from 20 QPS, two passes from 40 QPS. A stage sends int(rate × duration)
  requests (here int(0.58 × rate × duration)), its nth request with prompt n
  of the once-shuffled list, at the times of inference-perf's Poisson timer
  (each second a Poisson number of requests at exponential gaps scaled to
  fill the second).
- Stages drain: inference-perf starts a stage's timer only when every
  request of the previous stage has ended, 2 s later (its 1 s stage
  interval plus the 1 s lead of the timer). Every stage therefore starts
  with empty queues; this bounds the published TTFTs, where open-loop
  arrivals (-shared-client open) grow every policy's queue without bound
  once the offered load passes the fleet's decode capacity.
- Concurrency: at most num_workers × worker_max_concurrency requests in
  flight; a due request waits in the client for a free slot, and its time
  to first token runs from its send (the wait is the "client wait p90"
  column). Both are defaults: worker_max_concurrency 100, num_workers the
  load generator's CPU count, which the published report does not give;
  llm-d's benchmark harness's example report shows 112 on its H100 nodes,
  so 11,200, scaled like the rates: 0.58 × 11,200 = 6,496 in flight
  (-client-concurrency). That is more than any stage's requests (at most
  1,548 published, 897 simulated), so the bound never binds, which the
  published waiting-queue plot agrees with: under random and load-only
  routing the pods queued 100–124 requests each, most of a stage in
  flight at once.
- Timeout: inference-perf's HTTP session was built without a timeout, so the
  HTTP client's default total timeout of 300 s applies (-client-timeout). A
  request still streaming then is a failure: in no TTFT or throughput
  figure, counted under "timed out"; its pod aborts it and frees its
  blocks at its next step, as vLLM does when the client disconnects.

A stage's TTFT p90 sits on a cliff: when more than a tenth of its requests
find their pod's cache full they wait for a running request's ~1,000-step
decode (35–45 s here), so a handful of requests more or less on one pod
moves the p90 from ~0.2 s to ~35 s. kvrouter and the oracle therefore run
(b) again under the next two seeds (other prompt shuffles and arrival
times); those repeats appear only in the acceptance lines.

What the model leaves out: network and router latency, tokenization, CPU
offload tiers, prefill/decode disaggregation, and any limit on a pod's
waiting queue.

Reading (b) and (c): with 1,000 output tokens a pod's decode capacity is
~2,000 output tok/s whatever the routing (a step reads every running
sequence's KV, shared prefix or not), so from ~20 published QPS every
stage offers more than the fleet decodes while it sends, and the backlog
drains after it. Whether a stage's first tokens stay fast depends on the
KV cache: vLLM admits a request only with free blocks, and a request holds
its blocks for its whole ~1,000-step decode (tens of seconds), so once a
pod's cache is full new requests wait for running ones to finish. Routing
that keeps each group's 375 prefix blocks on one pod fits several times
more requests per pod than routing that copies prefixes everywhere; a
policy's "collapse" (stage p90 > 5 s) is the stage where its pods' caches
fill before the stage's requests are all admitted. The published precise
scheduler stays sub-second up to 60 QPS, where 1,470–1,548 requests a
stage are sent at 40–60 QPS; with 1,000 tokens each at its published 27–29
ms mean inter-token latency a request runs at least ~27 s, so at least
~1,000 would be in flight at once, needing ≥ 1,000 × (1,200 + ~500) + 150 ×
6,000 ≈ 2.6M tokens of KV against the fleet's 2.46M; the
published configuration's own comment notes "observed live ≈ 200–230
tokens/running request", so the real run's requests likely decoded fewer
tokens than the configured 1,000 (-shared-output sets the simulated
length; the report keeps the configured one).
`
