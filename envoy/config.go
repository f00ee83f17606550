package envoy

import _ "embed"

// Bootstrap is envoy.yaml: a static Envoy bootstrap that puts kvrouter (gRPC
// on 127.0.0.1:9002) in front of the pods as an ext_proc filter.
//
//go:embed envoy.yaml
var Bootstrap []byte
