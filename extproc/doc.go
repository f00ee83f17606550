// Package extproc is kvrouter's Envoy external processor: the ext_proc gRPC
// server that reads each request's headers and body, asks the router for a
// destination pod, and answers Envoy with header and metadata mutations or an
// immediate error response. It is the only package that imports Envoy's protos.
//
// # Overview
//
// Envoy opens one Process stream per HTTP request. In FULL_DUPLEX_STREAMED
// mode (the default, as the Gateway API Inference Extension uses it) the
// body arrives in chunks while the header response is held back; once the
// body is complete the server routes it, sends the header response with
// x-gateway-destination-endpoint (raw_value, overwrite), the x-kvrouter-*
// routing headers and clear_route_cache, attaches envoy.lb dynamic metadata
// naming the endpoint, and re-sends the body in pieces of at most 62,000
// bytes, the last with end_of_stream (or a trailers response when trailers
// follow). In BUFFERED mode the header response is empty and the body
// response carries the destination. Envoy 1.34+ announces its modes in the
// stream's first message, and those win over the configured one.
//
// The response phase is answered too: response headers get the routing
// headers (so clients and access logs see them) and mark the request's
// prefill done; response bodies are echoed; their end releases the request
// from the pod's load. Refusals from the router (400, 404, 413, 429, 503)
// become ImmediateResponses with an OpenAI-style JSON error body, in the
// function immediate and nowhere else. A gRPC error is returned only for
// real internal failures.
//
// # Concurrency
//
// gRPC runs each stream on its own goroutine; a stream's state is owned by
// that goroutine alone. The Router must be safe for concurrent use.
//
// # Memory
//
// A body that arrives in chunks is gathered in a buffer reserved from its
// content-length (at most 1 MiB up front, whatever the header claims) and
// recycled across streams once the request is answered: the Router must
// keep nothing of req.Body, and nothing else refers to it by then (the
// re-sent pieces are marshaled when Send returns). A body that arrives in
// one message is used as received. Answers are marshaled into pooled
// buffers sized to them rather than gRPC's default 1 MiB for anything over
// 32 KiB, and a stream re-sends every body piece (a streamed reply is
// thousands) with one message it keeps.
//
// # Lifecycle
//
// New validates the Config and starts nothing. Run serves on a listener
// with the health services (liveness, readiness and
// envoy.service.ext_proc.v3.ExternalProcessor) until its context ends, then
// reports not serving and drains open streams for up to
// Config.DrainTimeout. SetReady flips readiness, e.g. once discovery synced.
package extproc
