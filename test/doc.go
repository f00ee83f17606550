// Package test holds kvrouter's end-to-end tests and the tools they use: the
// vLLM pod simulator, the fleet simulator, the Envoy-faithful ext_proc client,
// load generators and the oracle harnesses.
package test
