package fleetsim

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// burst is n requests of distinct 4-block prompts all due at time 0.
func burst(n, output int) *Workload {
	var reqs []Request
	for i := range n {
		h := uint64(100 * (i + 1))
		reqs = append(reqs, Request{Arrival: 0, Prompt: 64, Output: output, Hashes: []uint64{h, h + 1, h + 2, h + 3}})
	}
	return manual(reqs...)
}

// maxInFlight is the most requests sent and not yet ended at once; an
// end and a send at the same instant do not overlap (the send takes the
// freed slot).
func maxInFlight(res *Result) int {
	type edge struct {
		at    float64
		delta int
	}
	var edges []edge
	for _, o := range res.Outcomes {
		edges = append(edges, edge{o.Arrival, 1}, edge{o.Finish, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return a.delta - b.delta // ends first
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

func TestClientConcurrencyBound(t *testing.T) {
	for _, c := range []int{1, 3, 7} {
		cfg := DefaultConfig()
		cfg.Pods = 2
		cfg.Client = Client{Concurrency: c}
		res, _ := runFirstPod(t, cfg, burst(20, 5))
		if got := maxInFlight(res); got != c {
			t.Errorf("concurrency %d: at most %d requests in flight, want exactly %d", c, got, c)
		}
		var sent []float64
		for i, o := range res.Outcomes {
			if o.Finish <= 0 {
				t.Fatalf("concurrency %d: request %d never finished", c, i)
			}
			sent = append(sent, o.Arrival)
		}
		if !slices.IsSorted(sent) {
			t.Errorf("concurrency %d: send times %v, want the queue served oldest first", c, sent)
		}
	}
}

// TestClientQueueWaitNotInTTFT: with one slot the second request waits
// in the client for the first to finish; its time to first token runs
// from its send and matches the first's, and the wait is reported apart.
func TestClientQueueWaitNotInTTFT(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods = 1
	cfg.Client = Client{Concurrency: 1}
	w := burst(2, 3)
	res, _ := runFirstPod(t, cfg, w)
	a, b := res.Outcomes[0], res.Outcomes[1]
	wantTTFT := cfg.StepOverhead.Seconds() + cfg.prefillSeconds(0, 64)
	if b.Scheduled != 0 || b.Arrival != a.Finish {
		t.Fatalf("second request scheduled %v, sent %v; want 0 and the first's finish %v", b.Scheduled, b.Arrival, a.Finish)
	}
	for i, o := range []Outcome{a, b} {
		if !near(o.First-o.Arrival, wantTTFT) {
			t.Errorf("request %d: TTFT %.6f, want %.6f (from its send)", i, o.First-o.Arrival, wantTTFT)
		}
	}
	st := Summarize(w, res, make([]int, 2))
	all := st[len(st)-1]
	if !near(all.P90, wantTTFT) || !near(all.WaitP90, a.Finish) {
		t.Fatalf("Summarize: TTFT p90 %.6f, client wait p90 %.6f; want %.6f and %.6f", all.P90, all.WaitP90, wantTTFT, a.Finish)
	}
}

// TestClientTimeoutAborts: a request still decoding at the client's
// timeout is canceled, its pod drops it and frees its blocks for the
// next one, and no figure but the timed-out count includes it.
func TestClientTimeoutAborts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods, cfg.Blocks = 1, 1000
	cfg.Client = Client{Concurrency: 1, Timeout: time.Second}
	w := manual(
		// 10,000 output tokens: ~55 s of decoding
		Request{Arrival: 0, Prompt: 64, Output: 10_000, Hashes: []uint64{1, 2, 3, 4}},
		Request{Arrival: 0, Prompt: 64, Output: 2, Hashes: []uint64{6, 7, 8, 9}},
	)
	res, p := runFirstPod(t, cfg, w)
	long, short := res.Outcomes[0], res.Outcomes[1]
	if !long.TimedOut || long.Finish != 0 || res.TimedOut != 1 {
		t.Fatalf("long request: timed out %v, finish %v, Result.TimedOut %d; want canceled, never finished, 1", long.TimedOut, long.Finish, res.TimedOut)
	}
	if short.TimedOut || !near(short.Arrival, 1) || short.Finish <= short.First {
		t.Fatalf("short request: timed out %v, sent %v, first %v, finish %v; want sent at the 1 s timeout and finished", short.TimedOut, short.Arrival, short.First, short.Finish)
	}
	if !near(res.End, short.Finish) {
		t.Fatalf("End = %v, want the short request's finish %v", res.End, short.Finish)
	}
	if pod := p.s.pods[0]; len(pod.running)+len(pod.waiting) != 0 || pod.cache.free != cfg.Blocks {
		t.Fatalf("pod after the run: %d running, %d waiting, %d of %d blocks free; want none, none, all",
			len(pod.running), len(pod.waiting), pod.cache.free, cfg.Blocks)
	}
	st := Summarize(w, res, make([]int, 2))
	if all := st[len(st)-1]; all.Requests != 1 || all.TimedOut != 1 || !near(all.P90, short.First-short.Arrival) {
		t.Fatalf("Summarize: %d requests, %d timed out, p90 %v; want 1, 1, the short one's TTFT", all.Requests, all.TimedOut, all.P90)
	}
}

// TestClientDrainsStages: a level's schedule starts StageGap after the
// previous level's last request ended, at the same offsets.
func TestClientDrainsStages(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods = 2
	cfg.Client = Client{DrainStages: true, StageGap: 2 * time.Second}
	w := burst(6, 50)
	w.Levels = []Level{{Name: "a", Start: 0, End: 1}, {Name: "b", Start: 1, End: 2}}
	for i := range w.Requests {
		w.Requests[i].Arrival = 0.1 * float64(i)
		if i >= 3 {
			w.Requests[i].Level = 1
			w.Requests[i].Arrival += 0.7 // offsets 0.0, 0.1, 0.2 into level b
		}
	}
	res, _ := runFirstPod(t, cfg, w)
	lastA := 0.0
	for _, o := range res.Outcomes[:3] {
		lastA = max(lastA, o.Finish)
	}
	if want := lastA + 2; !near(res.LevelStarts[1], want) || res.LevelStarts[0] != 0 {
		t.Fatalf("LevelStarts = %v, want [0 %v]", res.LevelStarts, want)
	}
	for i, o := range res.Outcomes[3:] {
		want := res.LevelStarts[1] + 0.1*float64(i)
		if !near(o.Scheduled, want) || !near(o.Arrival, want) {
			t.Errorf("level b request %d: scheduled %v, sent %v; want both %v", i, o.Scheduled, o.Arrival, want)
		}
	}
}

// TestClientDeterministic runs the benchmark-client model (bounded
// concurrency, timeouts, drained stages) twice per policy.
func TestClientDeterministic(t *testing.T) {
	cfg, w := tinySharedPrefix(t, 3, 2)
	cfg.Client = Client{Concurrency: 40, Timeout: 4 * time.Second, DrainStages: true, StageGap: 2 * time.Second}
	for _, name := range Policies {
		t.Run(name, func(t *testing.T) {
			a, b := runPolicy(t, cfg, w, name), runPolicy(t, cfg, w, name)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("two runs of %s with seed %d differ", name, cfg.Seed)
			}
			if got := maxInFlight(withEnds(a)); got > 40 {
				t.Fatalf("%s: %d requests in flight, want at most 40", name, got)
			}
		})
	}
}

// withEnds gives timed-out requests their cancel time as Finish, for
// maxInFlight.
func withEnds(res *Result) *Result {
	c := *res
	c.Outcomes = slices.Clone(res.Outcomes)
	for i := range c.Outcomes {
		if o := &c.Outcomes[i]; o.TimedOut {
			o.Finish = o.Arrival + 4
		}
	}
	return &c
}

func TestClientValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Client = Client{Concurrency: -1, Timeout: -time.Second}
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate of a negative client concurrency and timeout = nil, want an error")
	}
	w := manual(Request{Arrival: 0, Prompt: 16, Output: 1, Hashes: []uint64{1}}, Request{Arrival: 1, Prompt: 16, Output: 1, Hashes: []uint64{2}})
	w.Requests[0].Level = 1
	w.Levels = append(w.Levels, Level{Name: "y", End: 1e9})
	if _, err := Run(DefaultConfig(), w, func(s *Sim) (Policy, error) { return &firstPod{s: s}, nil }); err == nil {
		t.Fatal("Run of requests out of level order = nil error, want an error")
	}
}

func TestPoissonSchedule(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	const rate, n = 12.5, 5000
	at := poissonSchedule(rng, rate, n)
	if len(at) != n || !slices.IsSorted(at) || at[0] <= 0 {
		t.Fatalf("poissonSchedule: %d times, sorted %v, first %v; want %d sorted positive times", len(at), slices.IsSorted(at), at[0], n)
	}
	if got := float64(n) / at[n-1]; got < 0.95*rate || got > 1.05*rate {
		t.Fatalf("poissonSchedule rate = %.2f/s, want %.2f ± 5%%", got, rate)
	}
}
