// Package wire decodes the KV-cache event batches vLLM publishes: pure Go, no
// transport, so it builds and fuzzes without libzmq (CGO_ENABLED=0).
//
// # Overview
//
// A vLLM pod started with --kv-events-config publishes one msgpack batch per
// scheduler step. Decoder turns a batch's payload into a Batch of Events,
// accepting every form vLLM's releases used: outer [ts, events],
// [ts, events, rank] or a map; events as tag-first positional arrays of any
// length or as maps with a "type" key and omitted defaults; block hashes as
// integers of any width or as raw digest bytes (their last 8 bytes
// big-endian, the index key); unknown tags and fields are skipped. It
// allocates nothing in steady state and fails with ErrMalformed, never
// panics, on hostile input.
//
// # Concurrency
//
// A Decoder is not safe for concurrent use; the Batch it returns is valid
// until its next Decode. Each pod's applier owns one.
package wire
