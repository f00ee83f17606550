// Package extproc is kvrouter's Envoy external processor: the ext_proc gRPC
// server that reads each request's headers and body, asks the router for a
// destination pod, and answers Envoy with header and metadata mutations or an
// immediate error response. It is the only package that imports Envoy's protos.
package extproc
