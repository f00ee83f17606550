// Package manifests holds kvrouter's Kubernetes manifests (a kustomization):
// the router Deployment, RBAC, Service and configuration, Envoy, and a sample
// vLLM Deployment labeled for discovery.
package manifests
