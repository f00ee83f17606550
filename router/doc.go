// Package router turns an OpenAI-style request into a routing decision: it
// parses the body, obtains the exact token ids vLLM will see, hashes them into
// vLLM's prefix-cache block hashes, matches them against the KV index, weighs
// the cached prefix against each pod's load (read from package fleet) and
// picks the pod. It also names the routing headers every front end writes.
package router
