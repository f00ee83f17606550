// Package kvevents keeps the KV index current from the KV-cache events every
// vLLM pod publishes over ZeroMQ: one subscriber per pod, msgpack batch
// decoding, sequence tracking with replay on gaps, reconnects, and the pod
// discovery that starts and stops subscribers.
package kvevents
