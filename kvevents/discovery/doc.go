// Package discovery finds kvrouter's vLLM pods in Kubernetes: a pod
// informer per configured namespace, filtered by a label selector, turns
// each pod into a Pod (address, readiness, model, adapters, event ports) and
// tells a Consumer — in kvrouter, the router's fleet and the kvevents
// Manager — what appeared, changed or went away. It is the only package that
// imports client-go.
//
// # Pod metadata
//
// Discovery reads these from each selected pod (annotations unless noted):
//
//	kvrouter.io/model               served base model (annotation, else the label of
//	                                the same name, else Config.DefaultModel)
//	kvrouter.io/served-model-names  other names of the base model (--served-model-name), comma-separated
//	kvrouter.io/lora-adapters       LoRA adapter names, comma-separated
//	kvrouter.io/port                the OpenAI server port (also /metrics); else the
//	                                container port named "http", else Config.ServingPort (8000)
//	kvrouter.io/events-port         KV events PUB port (default 5557)
//	kvrouter.io/replay-port         KV events replay ROUTER port (default 5558)
//	kvrouter.io/dp-size             data-parallel size (rank k publishes on the ports + k)
//
// A pod is reported once it has an IP. It is Ready when its Ready condition
// is true and it is not being deleted; a pod that is not ready stays known
// (the router excludes it) until it is deleted, leaves the selector or loses
// its IP. A pod whose IP changes is removed and added again.
//
// # Concurrency
//
// Consumer calls come from one goroutine at a time, in the order of the
// events, and must not block.
//
// # Lifecycle
//
// New builds the client and registers the kvrouter_discovery_* metrics; it
// starts nothing. Run starts the informers and returns once they have
// stopped; Synced is closed when every informer has listed its pods and their
// events were delivered.
package discovery
