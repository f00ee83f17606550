// Package proxy is kvrouter's second front end beside extproc: an
// OpenAI-compatible HTTP reverse proxy that routes every request with the
// same router.Router and forwards it to the chosen pod, for users without
// Envoy and for the local demo.
package proxy
