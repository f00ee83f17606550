// Package vllmsim is a simulated vLLM pod for tests and the local demo: an
// OpenAI HTTP API (completions, chat, models, Prometheus metrics) in front of
// a bounded LRU prefix cache of vLLM block hashes, computed with the model's
// real tokenizer and vLLM's hash chain, whose changes it publishes as vLLM's
// ZMQ KV events (with replay) through package vllmpub. A prompt's cached
// prefix skips its simulated prefill, so routing quality shows as latency.
package vllmsim
