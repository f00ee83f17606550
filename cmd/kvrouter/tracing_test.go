package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
)

// otlpReceiver is an OTLP trace receiver on loopback, over gRPC (the
// collector's trace service) or HTTP/protobuf (POST /v1/traces): it keeps
// every span it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	endpoint string // for OTEL_EXPORTER_OTLP_ENDPOINT
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
}

func (r *otlpReceiver) keep(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		r.resource = map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			r.resource[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.keep(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func newOTLPReceiver(t *testing.T, protocol string) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.endpoint = "http://" + ln.Addr().String()
	if protocol == "grpc" {
		s := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(s, r)
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(s.Stop)
		return r
	}
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg collectortrace.ExportTraceServiceRequest
		if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.keep(&msg)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	})}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return r
}

// route returns the kvrouter.route span of trace, its attributes and the
// names of its children, once the receiver has it.
func (r *otlpReceiver) route(t *testing.T, trace string) (*tracepb.Span, map[string]string, []string) {
	t.Helper()
	var (
		span     *tracepb.Span
		attrs    map[string]string
		children []string
	)
	waitFor(t, "the span of trace "+trace, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		span, attrs, children = nil, map[string]string{}, nil
		for _, s := range r.spans {
			if hex.EncodeToString(s.GetTraceId()) == trace && s.GetName() == "kvrouter.route" {
				span = s
			}
		}
		if span == nil {
			return false
		}
		for _, kv := range span.GetAttributes() {
			if n, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
				attrs[kv.GetKey()] = fmt.Sprint(n.IntValue)
			} else {
				attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
		}
		for _, s := range r.spans {
			if string(s.GetParentSpanId()) == string(span.GetSpanId()) {
				children = append(children, s.GetName())
			}
		}
		return len(children) >= 5
	})
	return span, attrs, children
}

// TestTracing: with tracing on, a request through ext_proc and one through
// the proxy, each carrying a traceparent, produce kvrouter.route spans in
// the caller's trace, with the decision's attributes and its stages as
// children, exported to an OTLP receiver over gRPC and over HTTP/protobuf;
// the request to the pod carries a traceparent whose parent is kvrouter's
// span.
func TestTracing(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			recv := newOTLPReceiver(t, protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
			t.Setenv("OTEL_SERVICE_NAME", "kvrouter-under-test")
			var (
				mu       sync.Mutex
				upstream = map[string]string{}
			)
			pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				upstream[r.Header.Get("X-Request-Id")] = r.Header.Get("Traceparent")
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{}`)
			}))
			defer pod.Close()
			config := writeFile(t, "kvrouter.yaml", "tracing: {enabled: true}\n")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			args := []string{
				"serve", "--config", config, "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
				"--log-format", "json", "--pod", "p1=" + strings.TrimPrefix(pod.URL, "http://") + ",model=m",
			}
			go func() { done <- run(ctx, args, io.Discard, pw); _ = pw.Close() }()
			urls := announced(t, pr, "ext_proc gRPC server", "OpenAI proxy")
			body := []byte(`{"model":"m","prompt":"hello"}`)

			// ext_proc: Envoy sends the client's traceparent in the request headers.
			const extTrace, extParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			conn, err := grpc.NewClient(urls["ext_proc gRPC server"], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			res, err := envoyclient.New(conn).Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: body, Headers: [][2]string{
				{"x-request-id", "ext-1"}, {"traceparent", "00-" + extTrace + "-" + extParent + "-01"},
			}})
			if err != nil || res.Status != http.StatusOK {
				t.Fatalf("ext_proc request = %+v, %v", res, err)
			}
			span, attrs, children := recv.route(t, extTrace)
			if hex.EncodeToString(span.GetParentSpanId()) != extParent {
				t.Errorf("kvrouter.route's parent = %x, want the request's %s", span.GetParentSpanId(), extParent)
			}
			for k, v := range map[string]string{
				"kvrouter.model": "m", "kvrouter.pod": "p1", "kvrouter.endpoint": strings.TrimPrefix(pod.URL, "http://"),
				"kvrouter.reason": "no-tokenizer", "kvrouter.tokenization": "none", "kvrouter.request_id": "ext-1", "url.path": "/v1/completions",
			} {
				if attrs[k] != v {
					t.Errorf("attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
				}
			}
			for _, k := range []string{"kvrouter.cached_blocks", "kvrouter.total_blocks", "kvrouter.prompt_tokens"} {
				if _, ok := attrs[k]; !ok {
					t.Errorf("no attribute %s (all: %v)", k, attrs)
				}
			}
			for _, stage := range []string{"kvrouter.parse", "kvrouter.tokenize", "kvrouter.hash", "kvrouter.match", "kvrouter.score"} {
				if !strings.Contains(strings.Join(children, " "), stage) {
					t.Errorf("kvrouter.route's children %q lack %s", children, stage)
				}
			}
			want := "00-" + extTrace + "-" + hex.EncodeToString(span.GetSpanId()) + "-01"
			if got := res.UpstreamHeaders["traceparent"]; got != want {
				t.Errorf("the pod's traceparent through ext_proc = %q, want %q (kvrouter's span as parent)", got, want)
			}
			recv.mu.Lock()
			if recv.resource["service.name"] != "kvrouter-under-test" || recv.resource["service.version"] == "" {
				t.Errorf("resource %v, want OTEL_SERVICE_NAME's name and kvrouter's version", recv.resource)
			}
			recv.mu.Unlock()

			// The proxy: the client's traceparent is a header.
			const proxyTrace = "0af7651916cd43dd8448eb211c80319c"
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls["OpenAI proxy"]+"/v1/completions", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Request-Id", "proxy-1")
			req.Header.Set("Traceparent", "00-"+proxyTrace+"-b7ad6b7169203331-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			span, _, _ = recv.route(t, proxyTrace)
			mu.Lock()
			got := upstream["proxy-1"]
			mu.Unlock()
			if want := "00-" + proxyTrace + "-" + hex.EncodeToString(span.GetSpanId()) + "-01"; got != want {
				t.Errorf("the pod's traceparent through the proxy = %q, want %q (kvrouter's span as parent)", got, want)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve after cancel = %v", err)
			}
		})
	}
}
