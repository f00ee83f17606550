// Package manifests holds kvrouter's Kubernetes manifests: the kustomize base
// (the router Deployment, RBAC, Service and configuration, Envoy, and a sample
// vLLM Deployment labeled for discovery) and the Helm chart in charts/kvrouter,
// whose tests render both and compare what must match.
package manifests
