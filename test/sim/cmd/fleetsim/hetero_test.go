package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// TestHeteroScenarios: heterogeneous-speeds runs each of its two workloads under three
// seeds on fleets whose second half is at half the speed, under the
// kvrouters, the peers and the oracle (heteroPolicies); with -seeds past
// three, the kvrouters and precise (heteroRepeatPolicies) run under the
// seeds past the third.
func TestHeteroScenarios(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, seeds := range []int{0, 1, 3, 5} {
		n := max(seeds, heteroSeeds)
		scs, err := heteroScenarios(options{traces: "../../../../testdata/traces", seed: 4, seeds: seeds, quick: true}, h, fleetsim.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if len(scs) != 2*n {
			t.Fatalf("-seeds %d: %d scenarios, want %d", seeds, len(scs), 2*n)
		}
		for i, sc := range scs {
			pods := sc.cfg.Pods
			want := slices.Repeat([]float64{1}, pods/2)
			want = append(want, slices.Repeat([]float64{0.5}, pods-pods/2)...)
			policies := heteroPolicies
			if i%n >= heteroSeeds {
				policies = heteroRepeatPolicies
			}
			if sc.group != heterogeneousSpeeds || !slices.Equal(sc.cfg.Speeds, want) || sc.cfg.Seed != 4+uint64(i%n) || !slices.Equal(sc.only, policies) {
				t.Errorf("-seeds %d: %s: group %q, speeds %v, seed %d, policies %v", seeds, sc.w.Name, sc.group, sc.cfg.Speeds, sc.cfg.Seed, sc.only)
			}
			if err := sc.cfg.Validate(); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestHeteroReport: heterogeneous-speeds' section pools each policy's requests over the
// seeds, says whether learned speeds beat the global figure, and shows
// the estimates over time against each pod's speed; the acceptance
// compares kvrouter as shipped with llm-d's precise scheduler, and the
// plot draws every policy's TTFT by percentile.
func TestHeteroReport(t *testing.T) {
	jobs := heteroJobs(2, 2, func(_ int, p string) float64 {
		return map[string]float64{"kvrouter": 2, "kvrouter-learned": 1, "kvrouter-exact": 2.5, "llm-d-precise": 1.25}[p]
	}, "kvrouter", "kvrouter-learned", "kvrouter-exact", "llm-d-precise")
	for _, j := range jobs {
		if j.policy == "kvrouter-learned" {
			j.res.Speeds = []fleetsim.SpeedSample{{At: 5, Pod: 0, TokensPerSecond: 900}, {At: 5, Pod: 1, TokensPerSecond: 450}}
		}
	}
	got := heteroSection(jobs)
	wantIn(t, "heterogeneous-speeds section", got,
		"### heterogeneous-speeds, w\n",
		"| pooled (2 seeds) | kvrouter | 4 | 2.000 s | 4.000 s | 3.000 s | | |",
		"| pooled (2 seeds) | kvrouter-learned | 4 | 1.000 s | 2.000 s | 1.500 s | | |",
		"against kvrouter's global figure, pooled over the seeds: TTFT p90 2.000 s against 4.000 s (×0.50), mean 1.500 s against 3.000 s (×0.50): **better**",
		"Exact speeds (kvrouter-exact, the most learning can give) against kvrouter's global figure, pooled over the seeds: TTFT p90 5.000 s against 4.000 s (×1.25), mean 3.750 s against 3.000 s (×1.25): **not better**",
		"| time (s) | pod 0 (1000) | pod 1 (500) | slow / fast |",
		"| 5 | 900 | 450 | 0.50 |",
		"| pooled (2 seeds) | llm-d-precise | 4 | 1.250 s | 2.500 s | 1.875 s | | |",
		"TTFT by percentile, seeds pooled ([SVG](heterogeneous-speeds-shared-ttft.svg))",
	)
	wantIn(t, "heterogeneous-speeds acceptance", strings.Join(heteroAcceptance(jobs), "\n"),
		"heterogeneous-speeds, w, kvrouter as shipped (learned speeds), seeds 1, 2 pooled: kvrouter TTFT p90 2.000 s vs llm-d precise 2.500 s (×0.800), worst level 1x, 2.000 s vs 2.500 s (×0.800) (want ≤ 1.0 both): **holds**",
		"heterogeneous-speeds, w: Learned speeds against kvrouter's global figure",
		"heterogeneous-speeds, w: Exact speeds (kvrouter-exact, the most learning can give) against kvrouter's global figure",
	)
	dir := t.TempDir()
	if err := writeHeteroPlots(dir, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "heterogeneous-speeds-shared-ttft.png")); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "heterogeneous-speeds-shared-ttft.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"kvrouter", "kvrouter-learned", "kvrouter-exact", "llm-d-precise", "TTFT by percentile"} {
		if !strings.Contains(string(svg), p) {
			t.Errorf("plot lacks %q", p)
		}
	}
}

// TestHeteroReportManySeeds: past three seeds, heterogeneous-speeds' table lists the
// first three seeds' runs and pools all of them, and the learned lines
// count the blocks of three seeds where learning wins.
func TestHeteroReportManySeeds(t *testing.T) {
	// Learned speeds are faster than the global figure under seeds 1-3,
	// slower under seeds 4-6, and faster over all six.
	jobs := heteroJobs(6, 1, func(seed int, p string) float64 {
		switch {
		case p == "kvrouter":
			return 2
		case seed <= heteroSeeds:
			return 1
		}
		return 2.5
	}, "kvrouter", "kvrouter-learned")
	got := heteroSection(jobs)
	wantIn(t, "heterogeneous-speeds section", got,
		"| 3 | kvrouter | 1 |",
		"| pooled (6 seeds) | kvrouter | 6 | 2.000 s | 2.000 s | 2.000 s | | |",
		"| pooled (6 seeds) | kvrouter-learned | 6 | 1.000 s | 2.500 s | 1.750 s | | |",
		"Seeds past the first 3 ran kvrouter, kvrouter-mean, kvrouter-learned, kvrouter-exact, llm-d-precise only, and are pooled only.",
		"TTFT p90 2.500 s against 2.000 s (×1.25), mean 1.750 s against 2.000 s (×0.88): **not better**; pooled over each block of 3 seeds, its p90 is lower in 1 of 2 blocks and its mean in 1",
	)
	if strings.Contains(got, "| 4 | kvrouter |") {
		t.Errorf("heterogeneous-speeds section lists a seed past the third:\n%s", got)
	}
}

// heteroSection is heterogeneous-speeds' section of the report over jobs.
func heteroSection(jobs []*job) string {
	var b strings.Builder
	writeHetero(&b, jobs)
	return b.String()
}

// wantIn reports each of wants that got, what, lacks.
func wantIn(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// heteroJobs are heterogeneous-speeds runs of one workload,
// "heterogeneous-speeds, w", on a two-pod fleet of two speeds under seeds 1
// to seeds, each of policies: requests requests,
// the ith arriving at i+1 s and answered ttft(seed, policy) × (i+1) s later.
func heteroJobs(seeds, requests int, ttft func(seed int, policy string) float64, policies ...string) []*job {
	cfg := fleetsim.Config{Pods: 2, Blocks: 4, BlockSize: 16, PrefillTokensPerSecond: 1000, Speeds: []float64{1, 0.5}}
	var jobs []*job
	for seed := 1; seed <= seeds; seed++ {
		w := &fleetsim.Workload{Name: fmt.Sprintf("%s, w, seed %d", heterogeneousSpeeds, seed), Levels: []fleetsim.Level{{Name: "1x"}}, Requests: make([]fleetsim.Request, requests)}
		sc := &scenario{group: heterogeneousSpeeds, cfg: cfg, w: w}
		sc.cfg.Seed = uint64(seed)
		for _, p := range policies {
			res := &fleetsim.Result{}
			for i := range requests {
				at := float64(i + 1)
				res.Outcomes = append(res.Outcomes, fleetsim.Outcome{Arrival: at, First: at + at*ttft(seed, p), Finish: 99})
			}
			jobs = append(jobs, &job{sc: sc, policy: p, res: res, stats: []fleetsim.Stats{{Level: "all"}}})
		}
	}
	return jobs
}
