// Package envoyclient is a test client that drives an ext_proc server the
// way Envoy's ext_proc HTTP filter does (the rules
// docs/architecture.md lists under "Envoy's ext_proc client"): one stream per request, raw_value
// headers, FULL_DUPLEX_STREAMED or BUFFERED request bodies sent in arbitrary
// chunks, Envoy's ordering rules (a violation fails the request with 500 as
// Envoy would), Envoy's header-mutation rules, destination parsing as the
// ORIGINAL_DST cluster does it, immediate responses, and the response phase.
// No Envoy binary can run on these machines; this client stands in for it.
package envoyclient
