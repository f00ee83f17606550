package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// podServer is an upstream pod: it answers with its name, streams SSE when
// asked, and reports when a request's context ends.
type podServer struct {
	name     string
	release  chan struct{} // closed to let a stream send its second event
	canceled chan struct{} // closed when a streamed request's context ends
}

func (p *podServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"pod":%q,"path":%q,"pod_header":%q,"rank_header":%q,"body_bytes":%d}`, p.name, r.URL.Path, r.Header.Get("X-Kvrouter-Pod"), r.Header.Get(router.HeaderDPRank), len(body))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: one\n\n")
	_ = http.NewResponseController(w).Flush()
	select {
	case <-p.release:
		fmt.Fprint(w, "data: two\n\ndata: [DONE]\n\n")
	case <-r.Context().Done():
		close(p.canceled)
	}
}

// byteTokens tokenizes a prompt as its bytes.
type byteTokens struct{}

func (byteTokens) AppendTokens(dst []uint32, _ string, p *router.Parsed) ([]uint32, error) {
	for i := range len(p.Prompt) {
		dst = append(dst, uint32(p.Prompt[i]))
	}
	return dst, nil
}

const prompt = "the quick brown fox jumps over" // 30 bytes: 7 full blocks of 4

func completion(model, prompt, extra string) string {
	return fmt.Sprintf(`{"model":%q,"prompt":%q%s}`, model, prompt, extra)
}

// testFleet is a router over three pods a, b, c serving llama.
type testFleet struct {
	t      *testing.T
	router *router.Router
	index  *kvindex.Index
	fleet  *fleet.Fleet
	hasher *blockhash.Hasher
	reg    *prometheus.Registry // the router's metrics
}

// store records that pod holds prompt's blocks on its GPU.
func (tf *testFleet) store(pod, prompt string) {
	tf.t.Helper()
	ids, _ := byteTokens{}.AppendTokens(nil, "llama", &router.Parsed{Prompt: prompt})
	id, ok := tf.index.Pod(pod)
	if !ok {
		tf.t.Fatalf("pod %s not in the index", pod)
	}
	if err := tf.index.Stored(id, kvindex.TierGPU, tf.hasher.AppendHashes(nil, ids, blockhash.Extra{})); err != nil {
		tf.t.Fatal(err)
	}
}

func startProxy(t *testing.T) (*testFleet, *httptest.Server, map[string]*podServer) {
	t.Helper()
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hasher, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256, Seed: blockhash.DefaultSeed, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFleet{t: t, index: index, fleet: fleet.New(index), hasher: hasher, reg: prometheus.NewRegistry()}
	pods := map[string]*podServer{}
	for _, name := range []string{"a", "b", "c"} {
		ps := &podServer{name: name, release: make(chan struct{}), canceled: make(chan struct{})}
		up := httptest.NewServer(ps)
		t.Cleanup(up.Close)
		pods[name] = ps
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
		n, _ := strconv.Atoi(port)
		tf.fleet.Upsert(pod.Pod{Name: name, IP: host, Port: n, Model: "llama", Ready: true})
	}
	if tf.router, err = router.New(router.DefaultConfig(), tf.fleet, index, hasher, byteTokens{}, slog.New(slog.DiscardHandler), tf.reg); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(New(tf.router, 1<<20, nil, slog.New(slog.DiscardHandler)))
	t.Cleanup(front.Close)
	return tf, front, pods
}

func post(ctx context.Context, t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestProxyRoutes(t *testing.T) {
	tr, front, _ := startProxy(t)
	tr.store("b", prompt)
	resp := post(context.Background(), t, front.URL+"/v1/completions", completion("llama", prompt, ""))
	defer func() { _ = resp.Body.Close() }()
	var got struct {
		Pod       string `json:"pod"`
		PodHeader string `json:"pod_header"`
		BodyBytes int    `json:"body_bytes"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("reply %q: %v", raw, err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Kvrouter-Pod") != "b" || resp.Header.Get("X-Kvrouter-Cached-Blocks") != "7/7" ||
		resp.Header.Get("X-Kvrouter-Reason") != "prefix" || got.PodHeader != "b" || got.BodyBytes != len(completion("llama", prompt, "")) {
		t.Fatalf("proxied reply = %d %v %s, want 200 from pod b with 7/7 cached blocks", resp.StatusCode, resp.Header, raw)
	}
}

// TestProxyDPRank: a pod of two data-parallel ranks is two candidates; the
// request goes to its server with the chosen rank's header, replacing the
// one the client sent.
func TestProxyDPRank(t *testing.T) {
	tr, front, _ := startProxy(t)
	c := tr.fleet.Pods()[2]
	c.DPSize = 2
	for _, r := range pod.Ranks(c) {
		tr.fleet.Upsert(r)
	}
	tr.store("c:rank-1", prompt)
	req, err := http.NewRequest(http.MethodPost, front.URL+"/v1/completions", strings.NewReader(completion("llama", prompt, "")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Data-Parallel-Rank", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var got struct {
		Pod  string `json:"pod"`
		Rank string `json:"rank_header"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("reply %q: %v", raw, err)
	}
	if got.Pod != "c" || got.Rank != "1" || resp.Header.Get("X-Kvrouter-Pod") != "c:rank-1" {
		t.Fatalf("proxied to server %s with rank header %q (decision %s), want c with rank 1", got.Pod, got.Rank, resp.Header.Get("X-Kvrouter-Pod"))
	}
}

func TestProxyStreamsAndCancels(t *testing.T) {
	tr, front, pods := startProxy(t)
	tr.store("c", prompt)
	body := completion("llama", prompt, `,"stream":true`)

	// The first event arrives while the pod still holds the second.
	resp := post(context.Background(), t, front.URL+"/v1/completions", body)
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first SSE line = %q, %v, want it before the stream ends", line, err)
	}
	close(pods["c"].release)
	rest, _ := io.ReadAll(r)
	_ = resp.Body.Close()
	if !strings.Contains(string(rest), "data: [DONE]") || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("rest of the stream = %q (%s)", rest, resp.Header.Get("Content-Type"))
	}

	// A client that goes away cancels the pod's request.
	pods["c"].release = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	resp = post(ctx, t, front.URL+"/v1/completions", body)
	if line, _ := bufio.NewReader(resp.Body).ReadString('\n'); line != "data: one\n" {
		t.Fatalf("first SSE line = %q", line)
	}
	cancel()
	_ = resp.Body.Close()
	select {
	case <-pods["c"].canceled:
	case <-time.After(10 * time.Second): // a hang guard, not a performance bound
		t.Fatal("the pod's request was not canceled when the client left")
	}
	// The proxy's handler returns just after the pod saw the cancel.
	l := tr.fleet.Load("c")
	for deadline := time.Now().Add(10 * time.Second); l.InFlight.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // real sockets: poll with a bound
	}
	if l.InFlight.Load() != 0 {
		t.Fatalf("pod c in flight = %d after both requests ended, want 0", l.InFlight.Load())
	}
}

// TestProxyErrors: refusals answer with the OpenAI error of their status,
// and kvrouter_router_refusals_total counts each once, the body too large
// for the proxy included.
func TestProxyErrors(t *testing.T) {
	tf, front, _ := startProxy(t)
	for _, tt := range []struct {
		path, body string
		want       int
	}{
		{"/v1/completions", `{`, 400},
		{"/v1/completions", completion("nope", "x", ""), 404},
		{"/v1/completions", completion("llama", strings.Repeat("x", 2<<20), ""), 413},
	} {
		resp := post(context.Background(), t, front.URL+tt.path, tt.body)
		var b struct {
			Error struct{ Type string } `json:"error"`
		}
		err := json.NewDecoder(resp.Body).Decode(&b)
		_ = resp.Body.Close()
		if resp.StatusCode != tt.want || err != nil || b.Error.Type == "" {
			t.Errorf("POST %s = %d (%v), want %d with an OpenAI error", tt.path, resp.StatusCode, err, tt.want)
		}
	}
	for _, status := range []string{"400", "404", "413"} {
		if got := refusals(t, tf.reg, status); got != 1 {
			t.Errorf("kvrouter_router_refusals_total{status=%q} = %v, want 1", status, got)
		}
	}
}

// refusals reads kvrouter_router_refusals_total{status} from reg.
func refusals(t *testing.T, reg *prometheus.Registry, status string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_router_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() == status {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
