// Package envoy holds the Envoy configuration that puts kvrouter in front of
// a vLLM fleet as an ext_proc external processor, for local runs and for
// Kubernetes.
package envoy
