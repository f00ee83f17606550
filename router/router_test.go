package router

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// byteTokens tokenizes a prompt as its bytes, and a chat request as the
// bytes of its messages printed as JSON; model "qwen" has no tokenizer.
type byteTokens struct{}

func (byteTokens) AppendTokens(dst []uint32, base string, p *Parsed) ([]uint32, error) {
	if base == "qwen" {
		return dst, fmt.Errorf("tokenizers: %q: %w", base, ErrNoTokenizer)
	}
	text := p.Prompt
	if p.Chat != nil {
		text = printJSON(p.Chat.Messages)
	}
	for i := range len(text) {
		dst = append(dst, uint32(text[i]))
	}
	return dst, nil
}

type testRouter struct {
	*Router
	t     testing.TB
	index *kvindex.Index
	fleet *fleet.Fleet
	clock *atomic.Int64 // Config.Now, in unix nanoseconds: still unless a test moves it
}

// advance moves the router's clock on by d.
func (tr *testRouter) advance(d time.Duration) { tr.clock.Add(int64(d)) }

func newTestRouter(t testing.TB) *testRouter {
	t.Helper()
	return newTestRouterIndex(t, kvindex.DefaultConfig())
}

func newTestRouterIndex(t testing.TB, icfg kvindex.Config) *testRouter {
	t.Helper()
	index, err := kvindex.New(icfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fl := fleet.New(index)
	for _, p := range []pod.Pod{
		{Name: "a", IP: "10.0.0.1", Port: 8000, Model: "llama", LoRAs: []string{"alice"}, Ready: true},
		{Name: "b", IP: "10.0.0.2", Port: 8000, Model: "llama", Aliases: []string{"llama-chat"}, Ready: true},
		{Name: "c", IP: "10.0.0.3", Port: 8000, Model: "llama", Ready: true},
		{Name: "d", IP: "10.0.0.4", Port: 8000, Model: "qwen", Ready: true},
	} {
		fl.Upsert(p)
	}
	hasher, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256, Seed: "vllm-none-hash", BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	clock := &atomic.Int64{}
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := DefaultConfig()
	cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	r, err := New(cfg, fl, index, hasher, byteTokens{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return &testRouter{Router: r, t: t, index: index, fleet: fl, clock: clock}
}

// store records that pod holds the blocks of prompt (under lora and salt).
func (tr *testRouter) store(pod, prompt, lora, salt string) {
	tr.t.Helper()
	id, hs := tr.blocks(pod, prompt, lora, salt)
	if err := tr.index.Stored(id, kvindex.TierGPU, hs); err != nil {
		tr.t.Fatal(err)
	}
}

// evict records that pod removed the blocks of prompt from its GPU.
func (tr *testRouter) evict(pod, prompt string) {
	tr.t.Helper()
	id, hs := tr.blocks(pod, prompt, "", "")
	if err := tr.index.Removed(id, kvindex.TierGPU, hs); err != nil {
		tr.t.Fatal(err)
	}
}

// blocks returns pod's index handle and the block hashes of prompt.
func (tr *testRouter) blocks(pod, prompt, lora, salt string) (kvindex.PodID, []uint64) {
	tr.t.Helper()
	ids, _ := byteTokens{}.AppendTokens(nil, "llama", &Parsed{Prompt: prompt})
	id, ok := tr.index.Pod(pod)
	if !ok {
		tr.t.Fatalf("pod %s not in the index", pod)
	}
	return id, tr.hasher.AppendHashes(nil, ids, blockhash.Extra{LoRA: lora, CacheSalt: salt})
}

// scoreOn scores a completion body and returns pod's score.
func (tr *testRouter) scoreOn(body, pod, when string) Score {
	tr.t.Helper()
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(body)})
	if err != nil {
		tr.t.Fatal(err)
	}
	for _, s := range rep.Pods {
		if s.Pod == pod {
			return s
		}
	}
	tr.t.Fatalf("%s: pod %s not scored", when, pod)
	return Score{}
}

func (tr *testRouter) route(path, body string, subset ...string) (*Decision, error) {
	var s *Subset
	if subset != nil {
		s, _ = ParseSubset(subset)
	}
	return tr.Route(context.Background(), Request{ID: "req", Path: path, Body: []byte(body), Subset: s})
}

const prompt = "the quick brown fox jumps over" // 30 bytes: 7 full blocks of 4

func completion(model, prompt, extra string) string {
	return fmt.Sprintf(`{"model":%q,"prompt":%q%s}`, model, prompt, extra)
}

func TestRoutePrefix(t *testing.T) {
	tests := []struct {
		name, storePod, lora, salt, body string
		wantPod                          string
		wantMatched                      int
	}{
		{"base model", "b", "", "", completion("llama", prompt, ""), "b", 7},
		{"alias", "c", "", "", completion("llama-chat", prompt, ""), "b", 0}, // only b serves the alias
		{"lora", "a", "alice", "", completion("alice", prompt, ""), "a", 7},
		{"salt", "c", "", "s1", completion("llama", prompt, `,"cache_salt":"s1"`), "c", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTestRouter(t)
			tr.store(tt.storePod, prompt, tt.lora, tt.salt)
			d, err := tr.route("/v1/completions", tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if d.Pod != tt.wantPod || d.Matched != tt.wantMatched || d.Total != 7 || d.Tokens != 30 {
				t.Fatalf("Route = pod %s %d/%d blocks, %d tokens, want %s %d/7, 30 tokens", d.Pod, d.Matched, d.Total, d.Tokens, tt.wantPod, tt.wantMatched)
			}
			if want := ReasonPrefix; tt.wantMatched > 0 && d.Reason != want {
				t.Fatalf("Route reason = %s, want %s", d.Reason, want)
			}
		})
	}
}

func TestRouteExtraKeysKeepEntriesApart(t *testing.T) {
	tr := newTestRouter(t)
	tr.store("c", prompt, "", "")      // base, no salt
	tr.store("b", prompt, "alice", "") // LoRA blocks on a pod that does not serve alice
	for _, body := range []string{
		completion("alice", prompt, ""),                   // a LoRA request never matches base blocks
		completion("llama", prompt, `,"cache_salt":"s2"`), // a salted request never matches unsalted blocks
	} {
		d, err := tr.route("/v1/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		if d.Matched != 0 {
			t.Errorf("Route(%s) matched %d blocks on %s, want 0", body, d.Matched, d.Pod)
		}
	}
}

func TestRouteTokenIDsAndChat(t *testing.T) {
	tr := newTestRouter(t)
	ids := "["
	for i := range len(prompt) {
		ids += fmt.Sprintf("%d,", prompt[i])
	}
	ids = ids[:len(ids)-1] + "]"
	tr.store("c", prompt, "", "")
	d, err := tr.route("/v1/completions", `{"model":"llama","prompt":`+ids+`}`)
	if err != nil || d.Pod != "c" || d.Matched != 7 {
		t.Fatalf("Route(token ids) = %+v, %v, want c with 7 blocks", d, err)
	}
	chat := `{"model":"llama","messages":[{"role":"user","content":"hello there, how are you today?"}]}`
	tr.store("a", `[{"role": "user", "content": "hello there, how are you today?"}]`, "", "")
	d, err = tr.route("/v1/chat/completions", chat)
	if err != nil || d.Pod != "a" || d.Matched == 0 {
		t.Fatalf("Route(chat) = %+v, %v, want a with its blocks", d, err)
	}
}

func TestRouteByLoad(t *testing.T) {
	tr := newTestRouter(t)
	d, err := tr.route("/v1/completions", completion("qwen", prompt, ""))
	if err != nil || d.Pod != "d" || d.Reason != ReasonNoTokenizer {
		t.Fatalf("Route(no tokenizer) = %+v, %v, want d by %s", d, err, ReasonNoTokenizer)
	}
	d, err = tr.route("/v1/models", "")
	if err != nil || d.Reason != ReasonOtherPath {
		t.Fatalf("Route(/v1/models) = %+v, %v, want reason %s", d, err, ReasonOtherPath)
	}
	d, err = tr.route("/v1/embeddings", `{"model":"qwen","input":"x"}`)
	if err != nil || d.Pod != "d" {
		t.Fatalf("Route(embeddings for qwen) = %+v, %v, want d", d, err)
	}
}

// TestSharedPrefixSpreads sends many requests sharing a long system prompt
// at once: the pod holding the prefix must not take them all.
func TestSharedPrefixSpreads(t *testing.T) {
	tr := newTestRouter(t)
	system := "You are a helpful assistant. Answer briefly and precisely. "
	tr.store("a", system, "", "")
	used := map[string]int{}
	var ds []*Decision
	for i := range 30 {
		d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%squestion %d?", system, i), ""))
		if err != nil {
			t.Fatal(err)
		}
		used[d.Pod]++
		ds = append(ds, d)
	}
	if len(used) < 3 || used["a"] < used["b"] || used["a"] < used["c"] {
		t.Fatalf("30 concurrent shared-prefix requests went %v, want all three llama pods used, a the most", used)
	}
	for _, d := range ds {
		d.Done()
		d.Done() // twice is harmless
	}
	for _, name := range []string{"a", "b", "c"} {
		if l := tr.fleet.Load(name); l.InFlight.Load() != 0 || l.PrefillTokens.Load() != 0 {
			t.Fatalf("pod %s load after Done = %d in flight, %d prefill tokens, want 0", name, l.InFlight.Load(), l.PrefillTokens.Load())
		}
	}
}

func TestRouteRefusals(t *testing.T) {
	tr := newTestRouter(t)
	tr.fleet.Upsert(pod.Pod{Name: "e", IP: "10.0.0.5", Port: 8000, Model: "mistral", Ready: false})
	tests := []struct {
		name, path, body string
		subset           []string
		want             int
	}{
		{"invalid json", "/v1/completions", `{`, nil, http.StatusBadRequest},
		{"unknown model", "/v1/completions", completion("nope", "x", ""), nil, http.StatusNotFound},
		{"no ready pod", "/v1/completions", completion("mistral", "x", ""), nil, http.StatusServiceUnavailable},
		{"subset excludes all", "/v1/completions", completion("llama", "x", ""), []string{"10.9.9.9:1"}, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		_, err := tr.route(tt.path, tt.body, tt.subset...)
		if e := AsError(err); e == nil || e.Status != tt.want {
			t.Errorf("%s: Route = %v, want status %d", tt.name, err, tt.want)
		}
	}
	for range 5 {
		d, err := tr.route("/v1/completions", completion("llama", prompt, ""), "10.0.0.3:8000")
		if err != nil || d.Pod != "c" {
			t.Fatalf("Route with subset [c] = %+v, %v, want c", d, err)
		}
	}
}

func TestScoreRecordsNothing(t *testing.T) {
	tr := newTestRouter(t)
	tr.store("b", prompt, "", "")
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tokens != 30 || len(rep.Blocks) != 7 || len(rep.Pods) != 3 {
		t.Fatalf("Score = %+v, want 30 tokens, 7 blocks, 3 pods", rep)
	}
	for _, s := range rep.Pods {
		if (s.Pod == "b") != (s.Matched == 7) {
			t.Errorf("Score pod %s matched %d", s.Pod, s.Matched)
		}
	}
	if _, spec := tr.index.Len(); spec != 0 {
		t.Fatalf("Score left %d speculative entries, want none", spec)
	}
	if l := tr.fleet.Load("b"); l.InFlight.Load() != 0 {
		t.Fatalf("Score changed b's load")
	}
}

func TestRouteConcurrently(t *testing.T) {
	tr := newTestRouter(t)
	tr.store("a", prompt, "", "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			tr.fleet.Upsert(pod.Pod{Name: "c", IP: "10.0.0.3", Port: 8000, Model: "llama", Ready: i%2 == 0})
		}
	}()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 50 {
				d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%s %d %d", prompt, g, i), ""))
				if err != nil {
					errs <- err
					return
				}
				d.Done()
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	<-done
}

func TestRouteTieBreakUsesConfigIntN(t *testing.T) {
	tests := []struct {
		name    string
		draw    func(n int) int
		wantPod string
	}{
		{"keep the first", func(n int) int { return n - 1 }, "a"},
		{"take each newer", func(int) int { return 0 }, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTestRouter(t)
			var seen []int
			cfg := DefaultConfig()
			cfg.IntN = func(n int) int { seen = append(seen, n); return tt.draw(n) }
			r, err := New(cfg, tr.fleet, tr.index, tr.hasher, byteTokens{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			d, err := r.Route(context.Background(), Request{ID: "req", Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
			if err != nil {
				t.Fatal(err)
			}
			if d.Pod != tt.wantPod || fmt.Sprint(seen) != "[1 2 3]" {
				t.Fatalf("Route with injected IntN = pod %s after draws over %v, want %s after [1 2 3]", d.Pod, seen, tt.wantPod)
			}
		})
	}
}

// TestQueuedPodKeepsItsPrefix: under load a miss costs the pod its whole
// queue again, so a pod holding the prefix keeps the request although its
// queue is a little longer than the others'.
func TestQueuedPodKeepsItsPrefix(t *testing.T) {
	tr := newTestRouter(t)
	long := strings.Repeat(prompt, 13) // 390 bytes: 97 blocks
	tr.store("a", long, "", "")
	for name, waiting := range map[string]int64{"a": 5, "b": 4, "c": 4} {
		tr.fleet.Load(name).Waiting.Store(waiting)
	}
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", long, ""))})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Pods {
		behind := float64(tr.fleet.Load(s.Pod).Waiting.Load())
		if want := s.Queue + s.Prefill*(1+behind); math.Abs(s.Cost-want) > 1e-12 {
			t.Errorf("pod %s cost %v, want queue %v + prefill %v × (1 + %v queued) = %v", s.Pod, s.Cost, s.Queue, s.Prefill, behind, want)
		}
	}
	d, err := tr.route("/v1/completions", completion("llama", long, ""))
	if err != nil {
		t.Fatal(err)
	}
	if d.Pod != "a" {
		t.Fatalf("Route with the prefix on a (5 waiting) and b, c empty-handed (4 waiting) = %s, want a", d.Pod)
	}
	if l := tr.fleet.Load("a"); l.Prefilling.Load() != 1 {
		t.Fatalf("a's requests waiting for prefill = %d, want 1", l.Prefilling.Load())
	}
	d.Prefilled()
	d.Done()
	if l := tr.fleet.Load("a"); l.Prefilling.Load() != 0 {
		t.Fatalf("a's requests waiting for prefill after Prefilled = %d, want 0", l.Prefilling.Load())
	}
}

// TestQueueCostsFromScrapedLoad: a pod whose metrics report a queue costs
// more than its queue's worth.
func TestQueueCostsFromScrapedLoad(t *testing.T) {
	tr := newTestRouter(t)
	tr.fleet.Load("a").Waiting.Store(7)
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Pods {
		if s.Pod == "a" && s.Queue < 7*DefaultConfig().Tuning.WaitingSecondsPerRequest {
			t.Fatalf("pod a queue cost = %v, want at least 7 waiting requests' worth", s.Queue)
		}
	}
}

// routeToB routes the completion body to pod b (its subset) and fails the
// test unless it went there.
func (tr *testRouter) routeToB(body string) *Decision {
	tr.t.Helper()
	d, err := tr.route("/v1/completions", body, "10.0.0.2:8000")
	if err != nil || d.Pod != "b" {
		tr.t.Fatalf("Route = %+v, %v, want pod b", d, err)
	}
	return d
}
