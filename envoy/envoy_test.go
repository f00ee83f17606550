package envoy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// load parses envoy.yaml into Envoy's Bootstrap proto: every field name,
// type and typed_config must resolve, as Envoy itself would demand.
func load(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	return loadBytes(t, Bootstrap)
}

// TestKubernetesBootstrap: the Kubernetes variant (manifests/charts/kvrouter/files/envoy.yaml) is
// a valid bootstrap too, and speaks TLS with HTTP/2 to kvrouter.
func TestKubernetesBootstrap(t *testing.T) {
	data, err := os.ReadFile("../manifests/charts/kvrouter/files/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := loadBytes(t, data)
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != "kvrouter" {
			continue
		}
		tlsCtx := &tlsv3.UpstreamTlsContext{}
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(tlsCtx); err != nil {
			t.Fatalf("the kvrouter cluster's transport socket: %v, want TLS", err)
		}
		if got := tlsCtx.GetCommonTlsContext().GetAlpnProtocols(); len(got) != 1 || got[0] != "h2" {
			t.Errorf("ALPN to kvrouter = %v, want [h2] (gRPC)", got)
		}
		return
	}
	t.Fatal("the Kubernetes envoy.yaml has no kvrouter cluster")
}

func loadBytes(t *testing.T, data []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("envoy.yaml is not a valid Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml breaks Envoy's proto constraints: %v", err)
	}
	return &b
}

func TestBootstrap(t *testing.T) {
	b := load(t)
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	ep := &extprocv3.ExternalProcessor{}
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(ep); err != nil {
		t.Fatal(err)
	}
	pm := ep.GetProcessingMode()
	if pm.GetRequestBodyMode() != 4 || pm.GetRequestTrailerMode() != 1 || pm.GetResponseTrailerMode() != 1 {
		t.Errorf("processing mode = %v, want FULL_DUPLEX_STREAMED bodies with trailers SEND", pm)
	}
	if got := ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(); len(got) != 1 || got[0] != "envoy.lb" {
		t.Errorf("receiving namespaces = %v, want [envoy.lb]", got)
	}
	log := &streamv3.StdoutAccessLog{}
	if err := hcm.GetAccessLog()[0].GetTypedConfig().UnmarshalTo(log); err != nil {
		t.Fatal(err)
	}
	format := log.GetLogFormat().GetJsonFormat().String()
	for _, want := range []string{"%UPSTREAM_HOST%", "X-GATEWAY-DESTINATION-ENDPOINT", "X-KVROUTER-POD", "X-KVROUTER-CACHED-BLOCKS", "X-KVROUTER-REASON", "%RESPONSE_CODE%", "%RESPONSE_CODE_DETAILS%", "%RESPONSE_FLAGS%"} {
		if !strings.Contains(format, want) {
			t.Errorf("access log lacks %s", want)
		}
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	if c := clusters["vllm_pods"]; c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetOriginalDstLbConfig().GetHttpHeaderName() != "x-gateway-destination-endpoint" || !c.GetOriginalDstLbConfig().GetUseHttpHeader() {
		t.Errorf("vllm_pods cluster = %v, want ORIGINAL_DST reading x-gateway-destination-endpoint", c)
	}
	if c := clusters["kvrouter"]; c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
		t.Errorf("kvrouter cluster has no HTTP/2 protocol options: gRPC needs HTTP/2")
	}
}

// TestFallbackBootstrap: envoy-fallback.yaml, for kvrouter's fallback list, is
// a valid bootstrap whose pod cluster balances with override_host on the
// list (metadata first, then the header), records the endpoint that served
// where kvrouter reads it, retries on the next endpoint, and forwards
// envoy.lb to kvrouter.
func TestFallbackBootstrap(t *testing.T) {
	data, err := os.ReadFile("envoy-fallback.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := loadBytes(t, data)
	var pods *clusterv3.Cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == "vllm_pods" {
			pods = c
		}
	}
	oh := &overridehostv3.OverrideHost{}
	if err := pods.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(oh); err != nil {
		t.Fatalf("vllm_pods' load balancing: %v, want override_host", err)
	}
	src := oh.GetOverrideHostSources()
	if len(src) != 2 || src[0].GetMetadata().GetKey() != "envoy.lb" || src[0].GetMetadata().GetPath()[0].GetKey() != "x-gateway-destination-endpoint" ||
		src[1].GetHeader() != "x-gateway-destination-endpoint" {
		t.Errorf("override_host sources = %v, want envoy.lb metadata then the header", src)
	}
	if k := oh.GetSelectedHostKey(); k.GetKey() != "envoy.lb" || k.GetPath()[0].GetKey() != "x-gateway-destination-endpoint-served" {
		t.Errorf("selected host key = %v, want envoy.lb x-gateway-destination-endpoint-served", k)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if rp := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy(); rp.GetNumRetries().GetValue() < 1 || !strings.Contains(rp.GetRetryOn(), "connect-failure") {
		t.Errorf("retry policy = %v, want retries on connect failures", rp)
	}
	ep := &extprocv3.ExternalProcessor{}
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(ep); err != nil {
		t.Fatal(err)
	}
	if got := ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(); len(got) != 1 || got[0] != "envoy.lb" {
		t.Errorf("forwarding namespaces = %v, want [envoy.lb]: kvrouter reads the served endpoint there", got)
	}
}
