package router

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// loads sets the scraped metrics of the llama pods a, b and c.
func (tr *testRouter) loads(waiting, running map[string]int64, kvPermille int64) {
	for _, name := range []string{"a", "b", "c"} {
		l := tr.fleet.Load(name)
		l.Waiting.Store(waiting[name])
		l.Running.Store(running[name])
		l.KVUsagePermille.Store(kvPermille)
	}
}

// TestSaturatedFleetKeepsGroupOnItsPod: every pod decodes a full batch and
// a caches a group's 6,000-token prefix with 20 of the group's requests
// queued behind it. Those are cache hits, a few tokens of prefill each, so
// the group's next requests stay on a rather than prefill the prefix again
// on an emptier pod. When a's queue is 20 full prefills instead, the next
// request goes elsewhere.
func TestSaturatedFleetKeepsGroupOnItsPod(t *testing.T) {
	system := strings.Repeat("You are a helpful assistant. ", 207)[:6000] // 1,500 blocks of 4
	tests := []struct {
		name     string
		queued   func(i int) string // the prompts of the requests queued on a
		wantOnA  bool
		wantPods string
	}{
		{"queue of the group's hits", func(i int) string { return fmt.Sprintf("%squeued %d?", system, i) }, true, "a only"},
		{"queue of misses", func(i int) string { return fmt.Sprintf("%d %s", i, system) }, false, "b or c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTestRouter(t)
			tr.store("a", system, "", "")
			for i := range 20 {
				if _, err := tr.route("/v1/completions", completion("llama", tt.queued(i), ""), "10.0.0.1:8000"); err != nil {
					t.Fatal(err)
				}
			}
			tr.loads(map[string]int64{"a": 20}, map[string]int64{"a": 100, "b": 100, "c": 100}, 990)
			for i := range 10 {
				d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%squestion %d?", system, i), ""))
				if err != nil {
					t.Fatal(err)
				}
				if (d.Pod == "a") != tt.wantOnA {
					t.Fatalf("request %d of the group went to %s (matched %d/%d blocks), want %s", i, d.Pod, d.Matched, d.Total, tt.wantPods)
				}
				tr.fleet.Load("a").Waiting.Add(1) // the next scrape sees it queued
			}
		})
	}
}

// TestIdleFleetSpreadsHotPrefix: on an idle fleet a burst of requests
// sharing a prefix cached on a queues there until the decode those
// requests will share costs more than prefilling the prefix on another
// pod, so every pod takes some.
func TestIdleFleetSpreadsHotPrefix(t *testing.T) {
	tr := newTestRouter(t)
	system := strings.Repeat("Answer in French. ", 56)[:1000] // 250 blocks of 4
	tr.store("a", system, "", "")
	used := map[string]int{}
	for i := range 100 {
		d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%squestion %d?", system, i), ""))
		if err != nil {
			t.Fatal(err)
		}
		used[d.Pod]++
	}
	if len(used) < 3 || used["a"] < used["b"] || used["a"] < used["c"] {
		t.Fatalf("100 concurrent requests sharing a's prefix went %v, want all three llama pods used, a the most", used)
	}
}

// TestQueueCountsOwnRequestsByWork: the router's own queued requests count
// by the uncached tokens charged to them; waiting requests the pod reports
// beyond those (another replica's) count as their average, with
// WaitingSecondsPerRequest as a prior worth one request; every running or
// waiting request adds its decode share.
func TestQueueCountsOwnRequestsByWork(t *testing.T) {
	tr := newTestRouter(t)
	cfg := DefaultConfig()
	queueOf := func(pod string) float64 {
		t.Helper()
		rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", "x", ""))})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rep.Pods {
			if s.Pod == pod {
				return s.Queue
			}
		}
		t.Fatalf("pod %s not scored", pod)
		return 0
	}
	tr.loads(map[string]int64{"a": 10}, map[string]int64{"a": 4}, 0)
	want := 10*cfg.Tuning.WaitingSecondsPerRequest + (4+10)*cfg.Tuning.RunningSecondsPerRequest
	if got := queueOf("a"); math.Abs(got-want) > 1e-12 {
		t.Fatalf("queue of a with 10 foreign waiting, 4 running = %v, want %v", got, want)
	}
	for i := range 2 { // 30 uncached tokens each
		if _, err := tr.route("/v1/completions", completion("llama", fmt.Sprint(i)+prompt[1:], ""), "10.0.0.1:8000"); err != nil {
			t.Fatal(err)
		}
	}
	tr.fleet.Load("a").Waiting.Store(12) // the scrape sees the router's 2 and the 10 others
	own := 60 * cfg.secondsPerToken()
	want = own + 10*(own+cfg.Tuning.WaitingSecondsPerRequest)/3 + (4+12)*cfg.Tuning.RunningSecondsPerRequest
	if got := queueOf("a"); math.Abs(got-want) > 1e-12 {
		t.Fatalf("queue of a with 2 own requests of 30 tokens, 10 foreign waiting, 4 running = %v, want %v", got, want)
	}
}

// TestQueueDiscountsPrefillUnderWay: the pod began the oldest of the
// router's requests there when it arrived at the idle pod; the time since,
// up to that request's share of the charge, is done. When it is
// prefilled, the next one begins.
func TestQueueDiscountsPrefillUnderWay(t *testing.T) {
	tr := newTestRouter(t)
	cfg := DefaultConfig()
	var ds []*Decision
	for i := range 2 { // 30 uncached tokens each
		d, err := tr.route("/v1/completions", completion("llama", fmt.Sprint(i)+prompt[1:], ""), "10.0.0.1:8000")
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	each := 30 * cfg.secondsPerToken() // 3 ms
	for _, step := range []struct {
		name    string
		advance time.Duration
		prefill int // requests prefilled first
		want    float64
	}{
		{"just routed", 0, 0, 2*each + 2*cfg.Tuning.RunningSecondsPerRequest},
		{"the first 2 ms in", 2 * time.Millisecond, 0, 2*each - 0.002 + 2*cfg.Tuning.RunningSecondsPerRequest},
		{"past the first's share", 10 * time.Millisecond, 0, each + 2*cfg.Tuning.RunningSecondsPerRequest},
		{"the first prefilled: the second begins", 0, 1, each + cfg.Tuning.RunningSecondsPerRequest},
		{"the second 1 ms in", time.Millisecond, 0, each - 0.001 + cfg.Tuning.RunningSecondsPerRequest},
		// 12 requests decoding there: the second's 3 ms of prefill shares
		// the pod's steps with their 24 ms, so of the 3.7 ms since it
		// began, a ninth went to it.
		{"2.7 ms more beside 12 running", 2700 * time.Microsecond, 0, each - 0.0037/9 + 13*cfg.Tuning.RunningSecondsPerRequest},
	} {
		if step.name == "2.7 ms more beside 12 running" {
			tr.fleet.Load("a").Running.Store(12)
		}
		tr.advance(step.advance)
		for _, d := range ds[:step.prefill] {
			d.Prefilled()
		}
		ds = ds[step.prefill:]
		if got := tr.scoreOn(completion("llama", "x", ""), "a", step.name).Queue; math.Abs(got-step.want) > 1e-12 {
			t.Fatalf("%s: queue of a = %v, want %v", step.name, got, step.want)
		}
	}
	// Another replica's prefill in flight there too: the router cannot
	// tell when the pod began its own, and counts it whole.
	peer := kvindex.PodLoad{PrefillTokens: 20, Prefilling: 1}
	want := 50*cfg.secondsPerToken() + (12+2)*cfg.Tuning.RunningSecondsPerRequest
	if got, _ := tr.queueSeconds(tr.fleet.Load("a"), peer, cfg.secondsPerToken(), tr.now().UnixNano()); math.Abs(got-want) > 1e-12 {
		t.Fatalf("with another replica's request there: queue of a = %v, want %v", got, want)
	}
}

// TestFullFleetKeepsRequestsOnTheirPrefix: a caches a prefix and has three
// misses queued. With the fleet's KV caches empty the next request of the
// prefix prefills it again on an idle pod; with them 80% full that copy
// costs five prefills (Tuning.KVPressure) and the request waits on a.
func TestFullFleetKeepsRequestsOnTheirPrefix(t *testing.T) {
	system := strings.Repeat("Summarize the ticket. ", 91)[:2000] // 500 blocks of 4
	for _, tt := range []struct {
		kvPermille int64
		wantOnA    bool
	}{{0, false}, {500, false}, {800, true}} {
		t.Run(fmt.Sprint(tt.kvPermille), func(t *testing.T) {
			tr := newTestRouter(t)
			tr.store("a", system, "", "")
			for i := range 3 {
				if _, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%d %s", i, system), ""), "10.0.0.1:8000"); err != nil {
					t.Fatal(err)
				}
			}
			tr.loads(nil, nil, tt.kvPermille)
			rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", system+"question?", ""))})
			if err != nil {
				t.Fatal(err)
			}
			if u := float64(tt.kvPermille) / 1000; math.Abs(rep.KVPressure-1/(1-u)) > 1e-9 {
				t.Fatalf("KV usage %d‰: /v1/score reports pressure %v, want %v", tt.kvPermille, rep.KVPressure, 1/(1-u))
			}
			d, err := tr.route("/v1/completions", completion("llama", system+"question?", ""))
			if err != nil {
				t.Fatal(err)
			}
			if (d.Pod == "a") != tt.wantOnA {
				t.Fatalf("KV usage %d‰: the prefix's request went to %s (matched %d/%d blocks), want a: %v", tt.kvPermille, d.Pod, d.Matched, d.Total, tt.wantOnA)
			}
		})
	}
}

// TestKVPressure: an uncached token costs 1 + KVPressure × u/(1−u)
// prefills, u the candidates' mean KV usage up to MaxKVUsage.
func TestKVPressure(t *testing.T) {
	for _, tt := range []struct {
		weight   float64
		permille []int64
		want     float64
	}{
		{1, []int64{0, 0, 0}, 1},
		{1, []int64{500, 500, 500}, 2},
		{1, []int64{900, 600, 0}, 2},       // the mean, 0.5
		{1, []int64{1000, 1000, 1000}, 10}, // capped at 0.9
		{2, []int64{750, 750, 750}, 7},
		{0, []int64{1000, 1000, 1000}, 1},
	} {
		cfg := DefaultConfig()
		cfg.Tuning.KVPressure = tt.weight
		r := &Router{cfg: cfg}
		var members []*fleet.Member
		for _, p := range tt.permille {
			m := &fleet.Member{Load: &fleet.Load{}}
			m.Load.KVUsagePermille.Store(p)
			members = append(members, m)
		}
		if got, _, _ := r.weights(members); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("KVPressure %v, usage %v‰: pressure %v, want %v", tt.weight, tt.permille, got, tt.want)
		}
	}
}

// TestPrefillGrowsWithContext: a prompt token prefilled after c others
// costs PrefillSecondsPerToken × (1 + c × PrefillAttentionPerToken), so
// the uncached half of a long prompt costs more than its first half would.
func TestPrefillGrowsWithContext(t *testing.T) {
	tr := newTestRouter(t)
	cfg := DefaultConfig()
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 445)[:20000] // 5,000 blocks of 4
	tr.store("a", prompt[:10000], "", "")
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"a": 10000 * (1 + 15000*cfg.Tuning.PrefillAttentionPerToken) * cfg.secondsPerToken(), // the second half, after 10,000 cached
		"b": 20000 * (1 + 10000*cfg.Tuning.PrefillAttentionPerToken) * cfg.secondsPerToken(),
	}
	for _, s := range rep.Pods {
		if w, ok := want[s.Pod]; ok && math.Abs(s.Prefill-w) > 1e-3*w {
			t.Errorf("pod %s: prefill %.4f s, want %.4f s", s.Pod, s.Prefill, w)
		}
	}
	if cfg.Tuning.PrefillAttentionPerToken <= 0 {
		t.Fatalf("default PrefillAttentionPerToken %v, want > 0", cfg.Tuning.PrefillAttentionPerToken)
	}
}

// TestLearnedSpeedPricesEachPod: a pod whose metrics show it prefills at
// half the configured speed is priced at half: its prefill costs twice as
// much, it loses an uncached prompt to the idle pods at full speed, and
// /v1/score and the gauge show its speed. With Config.LearnPrefillSpeeds off,
// every pod is priced at the configured speed.
func TestLearnedSpeedPricesEachPod(t *testing.T) {
	tr := newTestRouter(t)
	cfg := DefaultConfig()
	// 600 s of prefill at half the speed: the prior's 0.5 s hardly count.
	tr.fleet.Load("b").SetSpeed(&fleet.Speed{Busy: 600, Tokens: 600 / (2 * cfg.secondsPerToken())})
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)
	body := []byte(completion("llama", prompt, ""))
	for _, learn := range []bool{true, false} {
		tr.cfg.LearnPrefillSpeeds = learn
		rep, err := tr.Score(Request{Path: "/v1/completions", Body: body})
		if err != nil {
			t.Fatal(err)
		}
		byPod := map[string]Score{}
		for _, s := range rep.Pods {
			byPod[s.Pod] = s
		}
		a, b := byPod["a"], byPod["b"]
		wantB := 1 / cfg.secondsPerToken()
		if learn {
			// The pooled estimate: the prior's 0.5 s at 10k tokens/s, 600 s at 5k.
			wantB = (fleet.PriorSeconds/cfg.secondsPerToken() + 600/(2*cfg.secondsPerToken())) / (fleet.PriorSeconds + 600)
		}
		if math.Abs(a.Speed-1/cfg.secondsPerToken()) > 1e-6*a.Speed || math.Abs(b.Speed-wantB) > 1e-3*wantB {
			t.Errorf("learn %v: speeds a %.0f, b %.0f tokens/s; want %.0f, %.0f", learn, a.Speed, b.Speed, 1/cfg.secondsPerToken(), wantB)
		}
		if got, want := b.Prefill/a.Prefill, (1/cfg.secondsPerToken())/wantB; math.Abs(got-want) > 1e-3*want {
			t.Errorf("learn %v: b's prefill %.4f s is %.3f × a's, want %.3f", learn, b.Prefill, got, want)
		}
		if learn {
			for i := range 20 {
				d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%d %s", i, prompt), ""))
				if err != nil {
					t.Fatal(err)
				}
				if d.Pod == "b" {
					t.Fatalf("request %d went to b at half the speed, with a and c idle", i)
				}
				d.Done()
			}
			if err := testutil.CollectAndCompare(speedCollector{tr.Router}, strings.NewReader(fmt.Sprintf(`
# HELP kvrouter_router_pod_prefill_tokens_per_second %s
# TYPE kvrouter_router_pod_prefill_tokens_per_second gauge
kvrouter_router_pod_prefill_tokens_per_second{pod="a"} 10000
kvrouter_router_pod_prefill_tokens_per_second{pod="b"} %s
kvrouter_router_pod_prefill_tokens_per_second{pod="c"} 10000
kvrouter_router_pod_prefill_tokens_per_second{pod="d"} 10000
`, "The prefill speed each pod is priced at, in tokens per second at no context: learned from its vLLM metrics, or routing.prefill_tokens_per_second.",
				strconv.FormatFloat(1/tr.PrefillSecondsPerToken(tr.fleet.Load("b")), 'g', -1, 64))), "kvrouter_router_pod_prefill_tokens_per_second"); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestReuseWeight: a caches a 2,000-token prefix behind six waiting
// requests of another replica; b and c are idle. Where prompts have rarely
// been found cached lately, copying the prefix to b or c is cheaper than
// a's queue. Where they mostly have been, that copy also pushes out
// blocks that will be prefilled again, and the request stays on a. The
// weight is the candidates' mean share, folded in by each decision.
func TestReuseWeight(t *testing.T) {
	system := strings.Repeat("Translate to French. ", 96)[:2000] // 500 blocks of 4
	for _, tc := range []struct {
		name   string
		reuse  float64
		weight float64
		onA    bool
	}{
		{"nothing reused lately", 0, 1, false},
		{"most prompts found cached", 0.9, 1, true},
		{"weight off", 0.9, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestRouter(t)
			tr.cfg.Tuning.ReuseWeight = tc.weight
			tr.store("a", system, "", "")
			for _, name := range []string{"a", "b", "c"} {
				tr.fleet.Load(name).FoldReuse(tc.reuse, 1)
			}
			tr.fleet.Load("a").Waiting.Store(6)
			rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", system+"question?", ""))})
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.weight * tc.reuse; math.Abs(rep.Reuse-want) > 1e-9 {
				t.Errorf("reuse weight %v, want %v", rep.Reuse, want)
			}
			d, err := tr.route("/v1/completions", completion("llama", system+"question?", ""))
			if err != nil {
				t.Fatal(err)
			}
			if (d.Pod == "a") != tc.onA {
				t.Fatalf("went to %s (matched %d/%d), want a: %v; scores %+v", d.Pod, d.Matched, d.Total, tc.onA, rep.Pods)
			}
			if got, want := tr.fleet.Load(d.Pod).Reuse(), tc.reuse+(float64(d.Matched)/float64(d.Total)-tc.reuse)/ReuseWindow; d.Pod == "a" && math.Abs(got-want) > 1e-9 {
				t.Errorf("a's reuse after the decision %v, want %v (this request's share folded in)", got, want)
			}
		})
	}
}

// TestPlace: a request the cheapest pod lacks more than half of places a
// new prefix on the least used KV cache among the pods within
// PlacementTolerance × share of the cheapest, ties at random; it places
// nothing when the cheapest pod caches half of it or more, when the
// prompts of late were never found cached (share 0), or when placement is
// off.
func TestPlace(t *testing.T) {
	cold := []Score{
		{Cost: 1.00, KVUsage: 0.5, uncached: 1000},
		{Cost: 1.10, KVUsage: 0.2, uncached: 1000},
		{Cost: 1.30, KVUsage: 0.1, uncached: 1000}, // outside 1.00 × (1 + 0.2)
		{Cost: 1.15, KVUsage: 0.2, uncached: 1000},
	}
	warm := []Score{
		{Cost: 0.10, KVUsage: 0.9, uncached: 500},
		{Cost: 0.11, KVUsage: 0.1, uncached: 1000},
	}
	tests := []struct {
		name   string
		scores []Score
		ok     func(int) bool
		tol    float64
		share  float64
		want   []int // the pods it may pick; nil: -1
	}{
		{"the least used cache within the window, ties either", cold, nil, 0.2, 1, []int{1, 3}},
		{"the window shrinks with the share", cold, nil, 0.2, 0.5, []int{1}},
		{"only the pods ok allows", cold, func(i int) bool { return i != 1 && i != 3 }, 0.2, 1, []int{0}},
		{"the cheapest caches half: no placement", warm, nil, 0.2, 1, nil},
		{"prompts never found cached lately", cold, nil, 0.2, 0, nil},
		{"placement off", cold, nil, 0, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Tuning.PlacementTolerance = tt.tol
			seen := map[int]bool{}
			for i := range 40 {
				cfg.IntN = func(n int) int { return i % n }
				r := &Router{cfg: cfg}
				got, placed := r.choose(tt.scores, tt.ok, 1000, tt.share)
				if !placed {
					got = -1 // placed nothing
				}
				seen[got] = true
			}
			want := map[int]bool{-1: true}
			if tt.want != nil {
				want = map[int]bool{}
				for _, i := range tt.want {
					want[i] = true
				}
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("place picked %v over 40 tie-breaks, want %v", seen, want)
			}
		})
	}
}

// TestNewPrefixGoesToTheEmptiestCache: on idle pods (equal costs) whose
// caches were found to hold prompts lately, a prompt no pod caches goes to
// the least used KV cache, every time (without placement one of the three
// at random); the group's next request goes where its prefix is.
func TestNewPrefixGoesToTheEmptiestCache(t *testing.T) {
	system := strings.Repeat("Summarize the ticket. ", 46)[:1000] // 250 blocks of 4
	for i := range 10 {
		tr := newTestRouter(t)
		for name, kv := range map[string]int64{"a": 800, "b": 300, "c": 500} {
			l := tr.fleet.Load(name)
			l.KVUsagePermille.Store(kv)
			l.FoldReuse(1, 1)
		}
		d, err := tr.route("/v1/completions", completion("llama", system+"first?", ""))
		if err != nil {
			t.Fatal(err)
		}
		if d.Pod != "b" || d.Reason != ReasonPlacement {
			t.Fatalf("router %d: a new prefix went to %s (%s), want b, the least used cache (placement)", i, d.Pod, d.Reason)
		}
		d.Prefilled()
		d.Done()
		tr.store("c", system, "", "")
		if d, err = tr.route("/v1/completions", completion("llama", system+"second?", "")); err != nil {
			t.Fatal(err)
		}
		if d.Matched < 250 {
			t.Fatalf("router %d: a request of the prefix b and c cache went to %s (matched %d/%d), want one of them", i, d.Pod, d.Matched, d.Total)
		}
	}
}

// TestQueueBeyondTheCacheExpiresMatches: once the prompts queued on a pod
// hold more tokens than its KV cache, the blocks it caches that no queued
// request uses are evicted before a new request's turn, and price as
// uncached; a prompt queued there keeps its blocks until a cache's worth
// of prompts is routed after it, counted by the share of their tokens the
// pod's prefix cache missed lately (all of them until its metrics show
// hits). An unknown capacity expires nothing.
func TestQueueBeyondTheCacheExpiresMatches(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.QueuePrefillsPerPod = 0          // the queue past the cache stays on the pod, as it does without the router's queue
	body := completion("llama", prompt, "") // 30 tokens, 7 full blocks
	tr.store("a", prompt, "", "")
	a := tr.fleet.Load("a")
	a.KVCapacity.Store(100)
	others := 0
	queue := func(n int) {
		t.Helper()
		for range n {
			others++
			other := fmt.Sprintf("%03d other prompt of forty tokens, queued", others) // 40 bytes
			if _, err := tr.route("/v1/completions", completion("llama", other, ""), "10.0.0.1:8000"); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when string, expiring int) {
		t.Helper()
		s, cold := tr.scoreOn(body, "a", when), tr.scoreOn(body, "c", when)
		if s.Matched != 7 || s.Expiring != expiring {
			t.Fatalf("%s: a matched %d blocks, %d expiring, want 7 and %d", when, s.Matched, s.Expiring, expiring)
		}
		if all := expiring == 7; all != (s.Prefill == cold.Prefill) {
			t.Errorf("%s: prefill on a %.3g s, on the cold c %.3g s: want them equal only when every matched block expires", when, s.Prefill, cold.Prefill)
		}
	}
	check("nothing queued", 0)
	queue(2) // 80 tokens queued: within the cache
	check("80 tokens queued", 0)
	queue(1)
	check("120 tokens queued", 7)
	d, err := tr.route("/v1/completions", body, "10.0.0.1:8000")
	if err != nil || d.Pod != "a" {
		t.Fatalf("routed to %v, %v; want a", d, err)
	}
	check("the prompt queued last", 0)
	queue(2)
	check("80 tokens routed after it", 0)
	queue(1)
	check("120 tokens routed after it", 7)
	at := time.Unix(1000, 0)
	a.ObserveCache(at, fleet.Counters{Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	a.ObserveCache(at.Add(time.Second), fleet.Counters{CacheQueries: 1000, CacheHits: 500, Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	if _, err := tr.route("/v1/completions", body, "10.0.0.1:8000"); err != nil {
		t.Fatal(err)
	}
	queue(4)
	check("160 tokens routed after it, half of them hits", 0)
	queue(1)
	check("200 tokens routed after it, half of them hits", 7)
	a.KVCapacity.Store(0)
	check("capacity unknown", 0)
}

// TestExpiringTailOffTheGPU: a pod whose GPU holds a prompt's head and its
// CPU tier the tail (an offloading connector keeps what the GPU evicts):
// past the cache's worth of allocations after a queued request that uses
// the head, the tail expires from the GPU's point of view, but blocks off
// the GPU are not what its eviction takes, and the head is fresh: nothing
// is priced as evicted. With the head unclaimed too, the GPU blocks expire.
func TestExpiringTailOffTheGPU(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.QueuePrefillsPerPod = 0 // the queue past the cache stays on the pod, as it does without the router's queue
	id, hs := tr.blocks("a", prompt, "", "")
	if err := tr.index.Stored(id, kvindex.TierGPU, hs[:3]); err != nil {
		t.Fatal(err)
	}
	if err := tr.index.Stored(id, kvindex.TierCPU, hs[3:]); err != nil {
		t.Fatal(err)
	}
	a := tr.fleet.Load("a")
	a.KVCapacity.Store(100)
	body := completion("llama", prompt, "")
	before := tr.scoreOn(body, "a", "nothing queued")
	head, err := tr.route("/v1/completions", completion("llama", prompt[:12]+" shares the head, forty bytes!", ""), "10.0.0.1:8000")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%03d other prompt of forty tokens, queued", i), ""), "10.0.0.1:8000"); err != nil {
			t.Fatal(err)
		}
	}
	if s := tr.scoreOn(body, "a", "head queued"); s.Expiring != 0 || s.Prefill != before.Prefill {
		t.Errorf("head queued: %d blocks expiring, prefill %.3g s (%.3g s before): want none, and the same", s.Expiring, s.Prefill, before.Prefill)
	}
	head.Prefilled()
	if _, err := tr.route("/v1/completions", completion("llama", "002 other prompt of forty tokens, queued", ""), "10.0.0.1:8000"); err != nil {
		t.Fatal(err)
	}
	if s := tr.scoreOn(body, "a", "head prefilled"); s.Expiring != 3 || s.Prefill <= before.Prefill {
		t.Errorf("head prefilled: %d blocks expiring, prefill %.3g s (%.3g s before): want the 3 on the GPU, and dearer", s.Expiring, s.Prefill, before.Prefill)
	}
}

// TestQueuedRoundTrip: the prompt tokens queued on a pod return to 0
// whatever a decision goes through: moves to fallbacks before and after
// its prefill, Done twice, a prefill hop; the clock only grows.
func TestQueuedRoundTrip(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.DestinationEndpoints = 3
	tr.store("b", prompt, "", "")
	d, err := tr.route("/v1/completions", completion("llama", prompt, ""))
	if err != nil {
		t.Fatal(err)
	}
	if q := tr.fleet.Load(d.Pod).Queued.Load(); q != 30 {
		t.Fatalf("%s: %d prompt tokens queued, want 30", d.Pod, q)
	}
	from := d.Pod
	if !d.Served(d.Fallbacks[0]) {
		t.Fatal("not moved to the first fallback")
	}
	if q, moved := tr.fleet.Load(from).Queued.Load(), tr.fleet.Load(d.Pod).Queued.Load(); q != 0 || moved != 30 {
		t.Fatalf("after the move: %s %d queued, %s %d; want 0 and 30", from, q, d.Pod, moved)
	}
	d.Served(d.Fallbacks[1])
	d.Prefilled()
	d.Served(d.Fallbacks[0]) // prefilled: nothing moves but the request
	d.Done()
	d.Done()
	for _, p := range []string{"a", "b", "c"} {
		if q := tr.fleet.Load(p).Queued.Load(); q != 0 {
			t.Errorf("%s: %d prompt tokens queued after Done, want 0", p, q)
		}
	}
	if c := tr.fleet.Load(from).Charged.Load(); c != 30*fleet.ChargedUnit {
		t.Errorf("%s: clock at %d, want the 30 tokens routed there", from, c)
	}
	tr.cfg.PDThresholdTokens = 8
	for _, p := range []pod.Pod{
		{Name: "p1", IP: "10.0.1.1", Port: 8000, Model: "pd", Role: pod.RolePrefill, Ready: true},
		{Name: "d1", IP: "10.0.2.1", Port: 8000, Model: "pd", Role: pod.RoleDecode, Ready: true},
	} {
		tr.fleet.Upsert(p)
	}
	d, err = tr.route("/v1/completions", completion("pd", prompt, ""))
	if err != nil || d.PrefillPod != "p1" {
		t.Fatalf("routed %+v, %v; want a hop through p1", d, err)
	}
	if q := tr.fleet.Load("p1").Queued.Load(); q != 30 {
		t.Errorf("p1: %d prompt tokens queued, want 30", q)
	}
	d.Done()
	for _, p := range []string{"p1", "d1"} {
		if q := tr.fleet.Load(p).Queued.Load(); q != 0 {
			t.Errorf("%s: %d prompt tokens queued after Done, want 0", p, q)
		}
	}
}
