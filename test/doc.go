// Package test holds kvrouter's end-to-end tests: kvrouter with simulated
// vLLM pods (internal/fixture/vllmsim) behind the Envoy-faithful ext_proc
// client (internal/fixture/envoyclient), real Redis, etcd and
// kube-apiserver processes, and the oracle harnesses. Its subfolders hold
// the fleet simulator (sim: its own module, fleetsim and cmd/fleetsim) and the load and
// event-bench tools (cmd).
package test
