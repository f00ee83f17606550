package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// TestOverloadScenarios: cache-overload is both published runs under three seeds,
// on 4 pods of Llama-3.1-70B TP2 derived from the 8B constants, ~40k KV
// tokens each, a 2,048-token step budget, llm-d's precise scheduler as
// those runs set it, constant-rate stages of 50 s (int(rate × 50)
// requests at exponential gaps scaled to fill the stage, as
// inference-perf's constant timer sends them), one prompt per user cycled
// in a fixed order.
func TestOverloadScenarios(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := options{seed: 4, timeout: ipTimeout}
	scs := overloadScenarios(o, h, fleetsim.DefaultConfig())
	if len(scs) != 2*3 {
		t.Fatalf("%d scenarios, want 2 runs × 3 seeds", len(scs))
	}
	for i, sc := range scs {
		c := sc.cfg
		run := &overloadPublished[i/3]
		if sc.overload != run || sc.group != cacheOverload || (i%3 == 0) != (sc.base == nil) || c.Seed != o.seed+uint64(i%3) {
			t.Fatalf("%s: run %v, group %q, base %v, seed %d", sc.w.Name, sc.overload.name, sc.group, sc.base, c.Seed)
		}
		if c.Pods != 4 || c.Blocks*c.BlockSize != 40_000 || c.StepTokens != 2048 || math.Abs(c.PrefillTokensPerSecond-5687) > 1 ||
			c.StepOverhead.Round(100*time.Microsecond) != 24200*time.Microsecond || c.KVBytesPerToken != 160<<10 {
			t.Fatalf("%s: %d pods of %d tokens, step %d tokens, prefill %.0f tokens/s, step cost %v, KV %v B/token",
				sc.w.Name, c.Pods, c.Blocks*c.BlockSize, c.StepTokens, c.PrefillTokensPerSecond, c.StepOverhead, c.KVBytesPerToken)
		}
		if c.Precise != fleetsim.OverloadPrecise() || c.Client.Concurrency != overloadConcurrency || !c.Client.DrainStages {
			t.Fatalf("%s: precise %+v, client %+v", sc.w.Name, c.Precise, c.Client)
		}
		if c.Approximate != fleetsim.OverloadApproximate() {
			t.Fatalf("%s: approximate %+v, want the runs' (OverloadApproximate)", sc.w.Name, c.Approximate)
		}
		w := sc.w
		if len(w.Levels) != len(overloadStages) {
			t.Fatalf("%s: %d levels, want %d", w.Name, len(w.Levels), len(overloadStages))
		}
		users := map[uint64]int{}
		per := make([]int, len(w.Levels))
		last := make([]float64, len(w.Levels))
		gaps := make([][]float64, len(w.Levels))
		for k, r := range w.Requests {
			per[r.Level]++
			last[r.Level] = r.Arrival
			if r.Prompt != run.system+run.question || r.Output != 20 {
				t.Fatalf("%s request %d: %d+%d tokens", w.Name, k, r.Prompt, r.Output)
			}
			users[r.Hashes[0]]++
			if k > 0 && r.Level == w.Requests[k-1].Level {
				gap := r.Arrival - w.Requests[k-1].Arrival
				if gap < 0 {
					t.Fatalf("%s request %d: sent %.6f s before the previous", w.Name, k, -gap)
				}
				gaps[r.Level] = append(gaps[r.Level], gap)
			}
		}
		for li, l := range w.Levels {
			if end := l.Start + overloadStageSecs; math.Abs(last[li]-end) > 1e-6 {
				t.Errorf("%s stage %s: last request at %.6f s, want the stage's end %.6f", w.Name, l.Name, last[li], end)
			}
			if cv := spreadOfGaps(gaps[li]); len(gaps[li]) >= 200 && (cv < 0.8 || cv > 1.2) {
				t.Errorf("%s stage %s: gaps' coefficient of variation %.2f, want about 1 (exponential)", w.Name, l.Name, cv)
			}
		}
		for li, q := range overloadStages {
			if per[li] != int(q*overloadStageSecs) {
				t.Errorf("%s stage %g: %d requests, want %d", w.Name, q, per[li], int(q*overloadStageSecs))
			}
		}
		if len(users) != run.users {
			t.Errorf("%s: %d distinct prompts, want %d users", w.Name, len(users), run.users)
		}
	}
}

// spreadOfGaps is the coefficient of variation of gaps.
func spreadOfGaps(gaps []float64) float64 {
	var sum, sq float64
	for _, g := range gaps {
		sum += g
	}
	mean := sum / float64(len(gaps))
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	return math.Sqrt(sq/float64(len(gaps))) / mean
}

// TestOverloadReport runs cache-overload's first run, shortened, under the four
// published policies and kvrouter, and checks the report's acceptance
// lines and table.
func TestOverloadReport(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	scs := overloadScenarios(options{seed: 1, quick: true, timeout: ipTimeout}, h, fleetsim.DefaultConfig())[:3]
	policies := []string{"random", "least-loaded", "approximate", "llm-d-precise", "kvrouter", fleetsim.PreciseShifted}
	var jobs []*job
	for _, sc := range scs {
		sc.bound = fleetsim.BoundHits(sc.w, sc.cfg.Pods*sc.cfg.Blocks)
		for _, p := range policies {
			jobs = append(jobs, &job{sc: sc, policy: p})
		}
	}
	runJobs(t.Context(), jobs, 2, &strings.Builder{})
	for _, j := range jobs {
		if j.err != nil {
			t.Fatalf("%s %s: %v", j.sc.w.Name, j.policy, j.err)
		}
	}
	lines := overloadAcceptance(jobs, verdict)
	if len(lines) != 2 || !strings.Contains(lines[0], "vs llm-d precise") || !strings.Contains(lines[1], "published order") ||
		!strings.Contains(lines[1], "approximate ") || !strings.Contains(lines[1], "; llm-d precise scraped half an interval later: ") {
		t.Fatalf("acceptance lines:\n%s", strings.Join(lines, "\n"))
	}
	var b strings.Builder
	writeOverload(&b, jobs, policyOrder(jobs))
	report := b.String()
	for _, want := range []string{"## cache-overload, 60 users", "seeds 1, 2, 3", "| llm-d-precise |", "/ 31.9 s |"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, fleetsim.PreciseShifted) {
		t.Errorf("report's tables show the shifted runs:\n%s", report)
	}
	if strings.Contains(report, "80 users") {
		t.Errorf("report has the run that did not run:\n%s", report)
	}
}

// static assigns users to pods for good: the first caps[0] users seen go
// to pod 0, the next caps[1] to pod 1, and so on.
type static struct {
	caps  []int
	users map[uint64]int
}

func (p *static) Pick(r *fleetsim.Request) int {
	u, ok := p.users[r.Hashes[0]]
	if !ok {
		u = len(p.users)
		p.users[r.Hashes[0]] = u
	}
	for i, c := range p.caps {
		if u < c {
			return i
		}
		u -= c
	}
	return len(p.caps) - 1
}

func (p *static) Started(*fleetsim.Request)  {}
func (p *static) Finished(*fleetsim.Request) {}

// TestOverloadStaticAssignments backs the report's argument that no
// placement of cache-overload's users beats an even spread: a pod keeps a user's
// prompt across a cycle only when it serves at most C/P users (10.6 of
// 60, 14.5 of 80), so pods sized to their caches hit half their prompts
// yet leave the rest so many cold prompts that the fleet completes less
// and the mean TTFT grows (in test/sim: go test ./cmd/fleetsim -run
// TestOverloadStaticAssignments -v).
func TestOverloadStaticAssignments(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	scs := overloadScenarios(options{seed: 1, timeout: ipTimeout}, h, fleetsim.DefaultConfig())
	for _, tc := range []struct {
		sc          *scenario
		even, sized []int
	}{
		{scs[0], []int{15, 15, 15, 15}, []int{10, 10, 10, 30}},
		{scs[3], []int{20, 20, 20, 20}, []int{14, 14, 14, 38}},
	} {
		run := func(caps []int, maxRunning int) fleetsim.Stats {
			cfg := tc.sc.cfg
			if maxRunning > 0 {
				cfg.MaxRunning = maxRunning
			}
			res, err := fleetsim.Run(cfg, tc.sc.w, func(*fleetsim.Sim) (fleetsim.Policy, error) {
				return &static{caps: caps, users: map[uint64]int{}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			st := fleetsim.Summarize(tc.sc.w, res, fleetsim.BoundHits(tc.sc.w, tc.sc.cfg.Pods*tc.sc.cfg.Blocks))
			all := st[len(st)-1]
			t.Logf("%s, users per pod %v, max running %d: TTFT mean %.2f s, p90 %.2f s, hit ratio %.1f%%, %.1f output tok/s, %d preemptions",
				tc.sc.w.Name, caps, cfg.MaxRunning, all.Mean, all.P90, 100*all.HitRatio, all.OutputTPS, res.Preemptions)
			return all
		}
		even, sized := run(tc.even, 0), run(tc.sized, 0)
		if sized.HitRatio < even.HitRatio+0.3 || sized.OutputTPS > 0.8*even.OutputTPS || sized.Mean < 1.5*even.Mean {
			t.Errorf("%s: sized %v hit %.2f, %.1f tok/s, mean %.2f s; even %v hit %.2f, %.1f tok/s, mean %.2f s; want the sized pods to hit more yet serve less and slower",
				tc.sc.w.Name, tc.sized, sized.HitRatio, sized.OutputTPS, sized.Mean, tc.even, even.HitRatio, even.OutputTPS, even.Mean)
		}
		// Nor is there much to win from the preemptions: pods running only
		// as many prompts as their KV holds (as a router holding requests
		// back until a pod has room would keep them) serve the even spread
		// about as fast, since a preempted prompt finds its blocks cached.
		if held := run(tc.even, overloadPodTokens/(tc.sc.w.Requests[0].Prompt+overloadOutput)); math.Abs(held.Mean/even.Mean-1) > 0.05 {
			t.Errorf("%s: even spread without preemptions TTFT mean %.2f s, with %.2f s; want within 5%%", tc.sc.w.Name, held.Mean, even.Mean)
		}
	}
}

// TestSeedsOf: seeds are listed in order, a run of four or more as a
// range.
func TestSeedsOf(t *testing.T) {
	for _, tt := range []struct {
		seeds []uint64
		want  string
	}{
		{nil, ""},
		{[]uint64{1}, "1"},
		{[]uint64{1, 2, 3}, "1, 2, 3"},
		{[]uint64{1, 2, 3, 4}, "1–4"},
		{[]uint64{7, 1, 2, 3, 4, 5, 9, 10, 11}, "7, 1–5, 9, 10, 11"},
	} {
		var js []*job
		for _, s := range tt.seeds {
			sc := &scenario{}
			sc.cfg.Seed = s
			js = append(js, &job{sc: sc})
		}
		if got := seedsOf(js); got != tt.want {
			t.Errorf("seedsOf(%v) = %q, want %q", tt.seeds, got, tt.want)
		}
	}
}
