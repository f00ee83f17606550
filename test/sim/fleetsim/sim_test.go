package fleetsim

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// firstPod sends everything to pod 0 and records the KV events it hears.
type firstPod struct {
	quiet
	s      *Sim
	events []string
}

func (p *firstPod) Pick(*Request) int { return 0 }

func (p *firstPod) KVEvents(pod int, ev []kvEvent) {
	p.events = append(p.events, fmt.Sprintf("%.4f pod%d %s", p.s.Now(), pod, eventsString(ev)))
}

// manual is a workload of the given requests, one level.
func manual(reqs ...Request) *Workload {
	w := &Workload{BlockSize: 16, Hash: blockhash.DefaultConfig(), Levels: []Level{{Name: "x", End: 1e9}}}
	for i, r := range reqs {
		r.ID = i
		w.Requests = append(w.Requests, r)
	}
	return w
}

func runFirstPod(t *testing.T, cfg Config, w *Workload) (*Result, *firstPod) {
	t.Helper()
	var p *firstPod
	res, err := Run(cfg, w, func(s *Sim) (Policy, error) { p = &firstPod{s: s}; return p, nil })
	if err != nil {
		t.Fatal(err)
	}
	return res, p
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPrefixHitSkipsPrefill(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods = 1
	w := manual(
		Request{Arrival: 0, Prompt: 64, Output: 1, Hashes: []uint64{1, 2, 3, 4}},
		Request{Arrival: 10, Prompt: 64, Output: 1, Hashes: []uint64{1, 2, 3, 4}},
		Request{Arrival: 20, Prompt: 70, Output: 1, Hashes: []uint64{1, 2, 9, 10}},
	)
	res, _ := runFirstPod(t, cfg, w)
	over := cfg.StepOverhead.Seconds()
	tests := []struct {
		hit      int
		wantTTFT float64
	}{
		{0, over + cfg.prefillSeconds(0, 64)},
		{3, over + cfg.prefillSeconds(48, 16)}, // vLLM recomputes the last block of a full hit
		{2, over + cfg.prefillSeconds(32, 38)},
	}
	for i, tt := range tests {
		o := res.Outcomes[i]
		if o.Hit != tt.hit || !near(o.First-o.Arrival, tt.wantTTFT) {
			t.Errorf("request %d: hit %d, TTFT %.6f; want %d, %.6f", i, o.Hit, o.First-o.Arrival, tt.hit, tt.wantTTFT)
		}
	}
}

func TestEventsReachPolicyAfterDelay(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods, cfg.Blocks = 1, 4
	w := manual(
		Request{Arrival: 0, Prompt: 64, Output: 1, Hashes: []uint64{1, 2, 3, 4}},
		Request{Arrival: 10, Prompt: 48, Output: 1, Hashes: []uint64{5, 6, 7}},
	)
	res, p := runFirstPod(t, cfg, w)
	d := cfg.EventDelay.Seconds()
	want := []string{
		fmt.Sprintf("%.4f pod0 [+1 +2 +3 +4]", res.Outcomes[0].First+d),
		// the new request's blocks evict the old tail first, then cache as they fill
		fmt.Sprintf("%.4f pod0 [-4 -3 -2 +5 +6 +7]", res.Outcomes[1].First+d),
	}
	if !reflect.DeepEqual(p.events, want) {
		t.Fatalf("events heard = %q, want %q", p.events, want)
	}
}

func TestPreemptionRecomputes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods, cfg.Blocks = 1, 8
	// two requests of 3 blocks each, admitted together, that both grow to
	// 6: the newer one is preempted, recomputed later, and both finish.
	w := manual(
		Request{Arrival: 0, Prompt: 48, Output: 40, Hashes: []uint64{1, 2, 3}},
		Request{Arrival: 0, Prompt: 48, Output: 40, Hashes: []uint64{5, 6, 7}},
	)
	res, _ := runFirstPod(t, cfg, w)
	if res.Preemptions == 0 {
		t.Fatal("no preemption with two requests that outgrow the cache")
	}
	for i, o := range res.Outcomes {
		if o.First <= 0 || o.Finish < o.First {
			t.Fatalf("request %d: first %v, finish %v; want 0 < first <= finish", i, o.First, o.Finish)
		}
	}
	if res.Outcomes[1].Finish <= res.Outcomes[0].Finish {
		t.Fatalf("preempted request finished at %v, before the other at %v", res.Outcomes[1].Finish, res.Outcomes[0].Finish)
	}
}

func TestDropsRequestsLargerThanAPod(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods, cfg.Blocks = 1, 4
	res, _ := runFirstPod(t, cfg, manual(Request{Prompt: 100, Output: 1, Hashes: []uint64{1, 2, 3, 4, 5, 6}}))
	if res.Dropped != 1 {
		t.Fatalf("Dropped = %d, want 1", res.Dropped)
	}
}

// TestSharedPrefixBlocksCountOnce: as in vLLM's block pool, requests that
// share a prefix reference its blocks once, so both fit where two copies
// would not; and a running request holds its blocks until it finishes, so
// a request that needs them waits.
func TestSharedPrefixBlocksCountOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods, cfg.Blocks = 1, 8
	// A and B: 80-token prompts sharing 4 blocks, 16 output tokens: 6
	// blocks each, 8 together. C shares nothing and needs 5 to start.
	w := manual(
		Request{Arrival: 0, Prompt: 80, Output: 16, Hashes: []uint64{1, 2, 3, 4, 5}},
		Request{Arrival: 0.001, Prompt: 80, Output: 16, Hashes: []uint64{1, 2, 3, 4, 6}},
		Request{Arrival: 0.002, Prompt: 80, Output: 16, Hashes: []uint64{7, 8, 9, 10, 11}},
	)
	res, _ := runFirstPod(t, cfg, w)
	a, b, c := res.Outcomes[0], res.Outcomes[1], res.Outcomes[2]
	if res.Preemptions != 0 || b.Hit != 4 || b.First >= a.Finish {
		t.Fatalf("B: hit %d, first token %v, A finished %v, %d preemptions; want 4 hits, B started while A decoded, none",
			b.Hit, b.First, a.Finish, res.Preemptions)
	}
	if c.Hit != 0 || c.First <= max(a.Finish, b.Finish) {
		t.Fatalf("C: hit %d, first token %v; want 0 hits, after A (%v) and B (%v) released their blocks", c.Hit, c.First, a.Finish, b.Finish)
	}
}

// TestPreemptedRequestHitsItsOwnBlocks: vLLM hashes output blocks as they
// fill, and a preempted request's freed blocks stay cached, so when it is
// admitted again it recomputes only what was evicted: here its 3 prompt
// and 2 output blocks are hits, and it prefills the rest of its tokens.
func TestPreemptedRequestHitsItsOwnBlocks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Blocks = 16
	p := newPod(&cfg, 1)
	s := &seq{req: &Request{Prompt: 48, Output: 100, Hashes: []uint64{1, 2, 3}}, target: 48, hit: -1, first: -1}
	p.waiting = append(p.waiting, s)
	for step := 0; s.out < 40; step++ {
		if _, ok := p.schedule(); !ok || step > 100 {
			t.Fatalf("step %d: nothing scheduled, %d tokens out", step, s.out)
		}
		p.finishStep(0, func(*seq) {}, func(*seq) {})
	}
	p.preemptLast() // 87 tokens computed: 5 full blocks, cached and freed
	if _, ok := p.schedule(); !ok {
		t.Fatal("preempted request not admitted again")
	}
	if s.computed != 5*16 || s.sched != 48+40-80 || s.hit != 0 {
		t.Fatalf("readmitted: %d tokens cached, %d scheduled, first hit %d; want 80 (3 prompt and 2 output blocks), 8, 0 (its first admission's)", s.computed, s.sched, s.hit)
	}
}

// TestPooledTTFT: the quantile is over every finished request of every
// run; timed-out and unfinished requests are left out.
func TestPooledTTFT(t *testing.T) {
	run := func(ttfts ...float64) *Result {
		r := &Result{}
		for _, x := range ttfts {
			r.Outcomes = append(r.Outcomes, Outcome{Arrival: 10, First: 10 + x, Finish: 20 + x})
		}
		r.Outcomes = append(r.Outcomes, Outcome{Arrival: 10, First: 500, Finish: 600, TimedOut: true}, Outcome{Arrival: 10})
		return r
	}
	a, b := run(1, 2, 3, 4, 5), run(6, 7, 8, 9, 10)
	for _, tt := range []struct {
		q    float64
		rs   []*Result
		want float64
	}{
		{0.9, []*Result{a, b}, 9},
		{0.5, []*Result{a, b}, 5},
		{0.9, []*Result{a}, 5},
		{0.9, nil, 0},
	} {
		if got := PooledTTFT(tt.q, tt.rs...); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("PooledTTFT(%v, %d runs) = %v, want %v", tt.q, len(tt.rs), got, tt.want)
		}
	}
}
