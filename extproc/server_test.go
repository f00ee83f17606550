package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/router"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeRouter routes every request to one pod, or refuses it by model.
type fakeRouter struct {
	mu      sync.Mutex
	seen    []router.Request
	refused []int // statuses of the requests refused before routing
}

func (f *fakeRouter) Refused(_, _, _ string, e *router.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, e.Status)
}

var errBoom = errors.New("boom")

func (f *fakeRouter) Route(_ context.Context, req router.Request) (*router.Decision, error) {
	f.mu.Lock()
	seen := req
	seen.Body = bytes.Clone(req.Body) // the server recycles req.Body
	f.seen = append(f.seen, seen)
	f.mu.Unlock()
	switch {
	case bytes.Contains(req.Body, []byte(`"model":"missing"`)):
		return nil, &router.Error{Status: 404, Type: "model_not_found", Param: "model", Message: "no pod serves missing"}
	case bytes.Contains(req.Body, []byte(`"model":"busy"`)):
		return nil, &router.Error{Status: 429, Type: "rate_limit_exceeded", Message: "shedding", RetryAfter: 1500 * time.Millisecond}
	case bytes.Contains(req.Body, []byte(`"model":"crash"`)):
		return nil, errBoom
	}
	return &router.Decision{RequestID: req.ID, Pod: "pod-a", Address: "10.1.2.3:8000", Matched: 3, Total: 5, Reason: router.ReasonPrefix}, nil
}

func (f *fakeRouter) last() router.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[len(f.seen)-1]
}

type harness struct {
	srv    *Server
	router *fakeRouter
	conn   *grpc.ClientConn
	client *envoyclient.Client
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{router: &fakeRouter{}}
	srv, err := New(cfg, h.router, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	h.conn, h.client = serve(t, srv)
	if cfg.BodyMode == Buffered {
		h.client.Mode = envoyclient.Buffered
	}
	return h
}

// serve runs srv on loopback until the test ends and returns an
// Envoy-faithful client of it.
func serve(t *testing.T, srv *Server) (*grpc.ClientConn, *envoyclient.Client) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, envoyclient.New(conn)
}

const body = `{"model":"qwen","prompt":"héllo wörld, a prompt long enough to split in many places"}`

func TestRoutesStreamedBodies(t *testing.T) {
	h := start(t, DefaultConfig())
	big := `{"model":"qwen","prompt":"` + strings.Repeat("x", 200_000) + `"}`
	tests := []struct {
		name string
		req  envoyclient.Request
	}{
		{"one chunk", envoyclient.Request{Path: "/v1/completions", Body: []byte(body)}},
		{"split inside UTF-8 and tokens", envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{1, 2, 17, 1, 3, 5}}},
		{"byte by byte", envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: ones(len(body))}},
		{"extra empty end_of_stream", envoyclient.Request{Path: "/v1/completions", Body: []byte(body), ExtraEOS: true}},
		{"trailers", envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Trailers: [][2]string{{"x-t", "1"}}}},
		{"larger than a chunk", envoyclient.Request{Path: "/v1/completions", Body: []byte(big), Chunks: []int{65536, 65536}}},
		{"no body", envoyclient.Request{Method: "GET", Path: "/v1/models"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := h.client.Do(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			checkRouted(t, res, tt.req.Body)
			if res.MaxPiece > DefaultConfig().ChunkBytes {
				t.Errorf("re-sent a body piece of %d bytes, want ≤ %d", res.MaxPiece, DefaultConfig().ChunkBytes)
			}
			if got := h.router.last(); !bytes.Equal(got.Body, tt.req.Body) || got.Path != tt.req.Path {
				t.Errorf("router saw %s %d bytes, want %s %d bytes", got.Path, len(got.Body), tt.req.Path, len(tt.req.Body))
			}
		})
	}
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func checkRouted(t *testing.T, res *envoyclient.Result, body []byte) {
	t.Helper()
	if res.Status != 200 || res.Destination != "10.1.2.3:8000" {
		t.Fatalf("Result = %d %q (%s), want 200 to 10.1.2.3:8000", res.Status, res.Destination, res.Details)
	}
	if !bytes.Equal(res.UpstreamBody, body) {
		t.Errorf("upstream body = %d bytes, want the %d sent", len(res.UpstreamBody), len(body))
	}
	for k, want := range map[string]string{"x-kvrouter-pod": "pod-a", "x-kvrouter-cached-blocks": "3/5", "x-kvrouter-reason": "prefix"} {
		if res.UpstreamHeaders[k] != want || res.ClientHeaders[k] != want {
			t.Errorf("%s = upstream %q, client %q, want %q", k, res.UpstreamHeaders[k], res.ClientHeaders[k], want)
		}
	}
	if got := res.Metadata["envoy.lb"]["x-gateway-destination-endpoint"]; got != "10.1.2.3:8000" {
		t.Errorf("envoy.lb metadata = %q, want the destination", got)
	}
	if string(res.ClientBody) != "{}" {
		t.Errorf("client body = %q, want the pod's reply echoed", res.ClientBody)
	}
	if res.Rejected != 0 {
		t.Errorf("%d header mutations rejected, want none", res.Rejected)
	}
}

func TestBufferedMode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BodyMode = Buffered
	h := start(t, cfg)
	big := `{"model":"qwen","prompt":"` + strings.Repeat("x", 200_000) + `"}` // one message of many frames
	for _, req := range []envoyclient.Request{
		{Path: "/v1/completions", Body: []byte(body)},
		{Path: "/v1/completions", Body: []byte(big)},
		{Path: "/v1/completions", Body: []byte(body), Trailers: [][2]string{{"x-t", "1"}}},
		{Method: "GET", Path: "/v1/models"},
	} {
		res, err := h.client.Do(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		checkRouted(t, res, req.Body)
		if got := h.router.last(); !bytes.Equal(got.Body, req.Body) {
			t.Errorf("router saw %d bytes, want the %d sent", len(got.Body), len(req.Body))
		}
	}
}

func TestProtocolConfigWins(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BodyMode = Buffered // Envoy says FULL_DUPLEX_STREAMED in its first message
	h := start(t, cfg)
	res, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{5}})
	if err != nil {
		t.Fatal(err)
	}
	checkRouted(t, res, []byte(body))
}

func TestImmediateResponses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 1000
	h := start(t, cfg)
	tests := []struct {
		name     string
		req      envoyclient.Request
		want     int
		wantType string
	}{
		{"not found", envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"missing","prompt":"x"}`)}, 404, "model_not_found"},
		{"shed", envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"busy","prompt":"x"}`), Headers: [][2]string{{"x-gateway-inference-objective", "batch"}}}, 429, "rate_limit_exceeded"},
		{"too large", envoyclient.Request{Path: "/v1/completions", Body: bytes.Repeat([]byte("x"), 5000), Chunks: []int{600, 600, 600}}, 413, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := h.client.Do(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			var b struct {
				Error struct{ Type, Message string } `json:"error"`
			}
			if res.Status != tt.want || json.Unmarshal(res.ClientBody, &b) != nil || b.Error.Type != tt.wantType || res.ClientHeaders["content-type"] != "application/json" {
				t.Fatalf("Result = %d %s %q, want %d with an OpenAI error of type %s", res.Status, res.ClientHeaders["content-type"], res.ClientBody, tt.want, tt.wantType)
			}
			if tt.want == 429 {
				if got := res.ClientHeaders["retry-after"]; got != "2" {
					t.Errorf("a shed request's Retry-After = %q, want 2 (1.5s rounded up)", got)
				}
				if got := h.router.last().Objective; got != "batch" {
					t.Errorf("the router saw objective %q, want batch from x-gateway-inference-objective", got)
				}
			}
		})
	}
	h.router.mu.Lock()
	refused := slices.Clone(h.router.refused)
	h.router.mu.Unlock()
	if !slices.Equal(refused, []int{413}) {
		t.Errorf("refusals the server made itself and logged through Refused = %v, want [413] (the router logs its own)", refused)
	}
	res, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"crash","prompt":"x"}`)})
	if err != nil || res.Status != 500 || !strings.Contains(res.Details, "gRPC_error") {
		t.Fatalf("an internal router failure = %+v, %v, want a gRPC error (Envoy: 500)", res, err)
	}
}

// TestSubsetHintReachesRouter: every form of the subset hint a gateway or a
// header-to-metadata rule writes reaches the router as the same endpoints;
// entries that name none are ignored and counted.
func TestSubsetHintReachesRouter(t *testing.T) {
	h := start(t, DefaultConfig())
	list := func(vs ...any) *structpb.Value {
		l, err := structpb.NewList(vs)
		if err != nil {
			t.Fatal(err)
		}
		return structpb.NewListValue(l)
	}
	ignored := 0.0
	for _, tt := range []struct {
		name    string
		value   *structpb.Value
		allow   []string
		deny    []string
		ignored int
	}{
		{"a list", list("10.1.2.3:8000", "10.9.9.9:8000"), []string{"10.1.2.3:8000", "10.9.9.9:8000"}, []string{"10.1.2.4:8000", "10.1.2.3:9000"}, 0},
		{"one string", structpb.NewStringValue("10.1.2.3:8000"), []string{"10.1.2.3:8000"}, []string{"10.1.2.4:8000"}, 0},
		{"comma-separated", structpb.NewStringValue("10.1.2.4:8000, 10.1.2.3:8000"), []string{"10.1.2.3:8000", "10.1.2.4:8000"}, []string{"10.1.2.5:8000"}, 0},
		{"bare IPs", list("10.1.2.3", "fd00::1"), []string{"10.1.2.3:8000", "10.1.2.3:9000", "[fd00::1]:8000"}, []string{"10.1.2.4:8000"}, 0},
		{"malformed entries", list("nope", "10.1.2.3:8000", 5.0, "10.1.2.3:99999"), []string{"10.1.2.3:8000"}, []string{"10.1.2.4:8000"}, 3},
		{"nothing usable", structpb.NewStringValue("garbage"), nil, []string{"10.1.2.3:8000"}, 1},
		{"a number", structpb.NewNumberValue(1), nil, []string{"10.1.2.3:8000"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body), SubsetValue: tt.value}); err != nil {
				t.Fatal(err)
			}
			got := h.router.last().Subset
			if got == nil {
				t.Fatal("router saw no subset")
			}
			for _, ep := range tt.allow {
				if !got.Allows(ep) {
					t.Errorf("subset %v does not allow %s", tt.value, ep)
				}
			}
			for _, ep := range tt.deny {
				if got.Allows(ep) {
					t.Errorf("subset %v allows %s", tt.value, ep)
				}
			}
			ignored += float64(tt.ignored)
			if n := testutil.ToFloat64(h.srv.metrics.subsetIgnored); n != ignored {
				t.Errorf("ignored entries = %v, want %v", n, ignored)
			}
		})
	}
	if _, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if got := h.router.last().Subset; got != nil {
		t.Errorf("no hint = subset %v, want nil (any endpoint)", got)
	}
}

func TestClientAbortAndHealth(t *testing.T) {
	h := start(t, DefaultConfig())
	if _, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{3}, AbortAfterBody: true}); err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(h.conn)
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, svc := range []string{"readiness", "inference-extension", "envoy.service.ext_proc.v3.ExternalProcessor"} { // inference-extension: the picker charts' probes
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.GetStatus() != want {
				t.Fatalf("health %q = %v, %v, want %v", svc, r.GetStatus(), err, want)
			}
		}
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING)
	h.srv.SetReady(true)
	check(healthpb.HealthCheckResponse_SERVING)
	// The server still answers after the aborted stream.
	res, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	checkRouted(t, res, []byte(body))
}

func TestStreamedReplyEchoed(t *testing.T) {
	h := start(t, DefaultConfig())
	var pieces [][]byte
	for i := range 200 {
		pieces = append(pieces, fmt.Appendf(nil, "data: {\"n\":%d}\n\n", i))
	}
	pieces = append(pieces, bytes.Repeat([]byte("z"), 70_000), []byte("data: [DONE]\n\n")) // one over a chunk
	res, err := h.client.Do(context.Background(), envoyclient.Request{
		Path: "/v1/completions", Body: []byte(body), Chunks: []int{9},
		Reply: &envoyclient.Reply{Status: 200, Headers: [][2]string{{"content-type", "text/event-stream"}}, Chunks: pieces},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := bytes.Join(pieces, nil); res.Status != 200 || !bytes.Equal(res.ClientBody, want) {
		t.Fatalf("client got %d with %d bytes, want 200 with the pod's %d bytes in order", res.Status, len(res.ClientBody), len(want))
	}
}

// TestMaxStreams: with extproc.max_streams open, one more stream is refused
// with RESOURCE_EXHAUSTED and counted; once one ends, the next is served.
func TestMaxStreams(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxStreams = 1
	h := start(t, cfg)
	held := envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{5}}
	held.InFlight = func() {
		for deadline := time.Now().Add(10 * time.Second); len(h.srv.streams) == 0; time.Sleep(time.Millisecond) { // the server took the stream
			if time.Now().After(deadline) {
				t.Fatal("the server never opened the first stream")
			}
		}
		res, err := h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body)})
		if err != nil || res.Status != 500 || !strings.Contains(res.Details, "ResourceExhausted") {
			t.Errorf("a second stream while one is open = %+v, %v; want a RESOURCE_EXHAUSTED gRPC error (Envoy: 500)", res, err)
		}
	}
	res, err := h.client.Do(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	checkRouted(t, res, []byte(body))
	if got := testutil.ToFloat64(h.srv.metrics.streamsRefused); got != 1 {
		t.Errorf("streams refused = %v, want 1", got)
	}
	for deadline := time.Now().Add(10 * time.Second); len(h.srv.streams) > 0; time.Sleep(time.Millisecond) { // the server ended the stream
		if time.Now().After(deadline) {
			t.Fatal("the server never ended the first stream")
		}
	}
	res, err = h.client.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body)})
	if err != nil {
		t.Fatalf("a stream after the open one ended: %v", err)
	}
	checkRouted(t, res, []byte(body))
}
