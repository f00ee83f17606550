// Package router turns an OpenAI-style request into a routing decision: it
// parses the body, obtains the exact token ids vLLM will see, hashes them
// into vLLM's prefix-cache block hashes, matches them against the KV index,
// prices each candidate pod's time to first token and picks the pod. It
// also names the routing headers every front end writes. docs/routing.md
// states the policy, its cost formula with the names /v1/score reports,
// and its settings (Config) and tuned numbers (Tuning).
//
// # Pipeline
//
// One file per stage, in the order a request meets them:
//
//	parse.go       the body: model, prompt or messages, cache_salt
//	candidates.go  the model's ready pods in the subset hint; blind pods out
//	shed.go        429 for a sheddable request when every candidate is saturated
//	tokenize.go    token ids and block hashes (prefix.go: a continued prompt)
//	evaluate.go    the stages above, then match (the index) and cost
//	cost.go        each candidate's cost: queue, prefill, pressure, reuse
//	queue.go       kvrouter's queue, while a model's caches are overrun
//	router.go      decide: destinations, the pick, the decision's record
//	homes.go       the pick through the prefix's home (hometable.go: the table)
//	choose.go      the pick by cost: tolerance, placement of a new prefix
//	pd.go          the prefill hop of a disaggregated model
//	fallback.go    the next best endpoints
//	decision.go    the decision: headers, prefilled, served, done
//	report.go      POST /v1/score's report of the stages, recording nothing
//
// # Concurrency
//
// A Router serves concurrent decisions. The fleet and the index are read
// without the router's locks; the queue (queue.go) and the homes' table
// (hometable.go) each have one lock, never held across a call to the
// index or the network.
package router
