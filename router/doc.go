// Package router turns an OpenAI-style request into a routing decision: it
// parses the body, obtains the exact token ids vLLM will see, hashes them into
// vLLM's prefix-cache block hashes, matches them against the KV index, weighs
// the cached prefix against each pod's load and picks the pod. It owns the
// fleet view (endpoints, readiness, load).
package router
