package router

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/replica"
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
	peer := replica.PodLoad{PrefillTokens: 20, Prefilling: 1}
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
			if err := testutil.CollectAndCompare(podCollector{tr.Router}, strings.NewReader(fmt.Sprintf(`
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
