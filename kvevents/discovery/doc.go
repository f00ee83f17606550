// Package discovery is the home of kvrouter's pod sources: each turns what
// it watches into pods (internal/pod.Pod: address, readiness, model,
// adapters, event ports) and tells a Consumer — in kvrouter, the router's
// fleet and the kvevents Manager — what appeared, changed or went away.
//
//   - Discovery, the Kubernetes informer: a pod informer per configured
//     namespace, filtered by a label selector. This is the only package that
//     imports client-go.
//     With Config.Pool set it serves an InferencePool instead
//     (inference.networking.k8s.io/v1, read with the GIE module's types
//     through the dynamic client): it watches that pool and every pod of its
//     namespace, and serves the pods its selector matches, on each of its
//     target ports. Target port k of a pod is its DP rank k: one candidate
//     named namespace/name for rank 0 and namespace/name:rank-k for the
//     others (see pod.RankName), on that port, with the KV event ports + k and
//     DP size 1; with a single target port the kvrouter.io/dp-size
//     annotation still applies. A pool edit re-reads every pod at once; a
//     pool missing or deleted serves no pod, is logged, counted in
//     kvrouter_discovery_pool_found and told to OnPool.
//   - Static, the pods known without Kubernetes: the static pods, which never
//     change, and those of a pods file, re-read on every tick and applied
//     when its content changed. The file's format is the caller's: it hands
//     Static a ParseFunc (kvrouter's YAML is read in cmd/kvrouter, with the
//     flags and the config file).
//
// # Pod metadata
//
// Discovery reads these from each selected Kubernetes pod (annotations
// unless noted):
//
//	kvrouter.io/model               served base model (annotation, else the label of
//	                                the same name, else Config.DefaultModel)
//	kvrouter.io/served-model-names  other names of the base model (--served-model-name), comma-separated
//	kvrouter.io/lora-adapters       LoRA adapter names, comma-separated
//	kvrouter.io/port                the OpenAI server port (also /metrics); else the
//	                                container port named "http", else Config.ServingPort (8000)
//	kvrouter.io/events-port         KV events PUB port (default: asked of the pod, else 5557)
//	kvrouter.io/replay-port         KV events replay ROUTER port (default: asked of the pod, else 5558)
//	kvrouter.io/dp-size             data-parallel size (rank k publishes on the ports + k;
//	                                each rank is a routing candidate of its own)
//	kvrouter.io/role                prefill, decode or both: the pod's part in
//	                                prefill/decode disaggregation (else llm-d's label
//	                                llm-d.ai/role, else both)
//	kvrouter.io/engine              vllm, sglang or trtllm: the engine whose KV events
//	                                and metrics the pod serves (else pods.default_engine)
//
// A pod is reported once it has an IP. It is Ready when its Ready condition
// is true and it is not being deleted; a pod that is not ready stays known
// (the router excludes it) until it is deleted, leaves the selector or loses
// its IP. A pod whose IP changes is removed and added again.
//
// # The pods file
//
// A pods file that cannot be read, does not parse or lists a bad pod (one
// that is not valid, a name used twice, a static pod's name) changes
// nothing: the last good pods stay, and the problem is reported once — until
// the read error or the content changes. Static counts the reads that found
// a change in kvrouter_podsfile_reloads_total{result} and the pods it knows
// in kvrouter_podsfile_pods.
//
// # Concurrency
//
// Each source calls its Consumer from one goroutine at a time, in the order
// of the changes, and the calls must not block. A Consumer shared by two
// sources, as kvrouter's is, is called from both at once and must be safe
// for that.
//
// # Lifecycle
//
// New builds the client and registers the kvrouter_discovery_* metrics; it
// starts nothing. Run starts the informers and returns once they have
// stopped; Synced is closed when every informer has listed its pods and their
// events were delivered.
//
// NewStatic registers the kvrouter_podsfile_* metrics and reads nothing;
// Reload applies the pods (call it once before Run to start with them), and
// Run re-reads the pods file on every tick until its context is done.
package discovery
