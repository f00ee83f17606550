package main

import (
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// sweepJobs is shared-prefix-overload and two larger working sets of it, under kvrouter and
// the oracle, with the pooled TTFT p90 and output tok/s given per
// scenario: kvrouter's, then the oracle's.
func sweepJobs(p90s, tps [][2]float64) []*job {
	var jobs []*job
	for i := range p90s {
		sc := &scenario{
			group: sharedPrefixOverload, output: 230, share: []float64{1.25, 2.5, 5}[i], groups: []int{128, 256, 512}[i], sweep: i > 0,
			cfg: fleetsim.Config{Pods: 1, Blocks: 4, BlockSize: 16}, w: &fleetsim.Workload{Name: sharedPrefixOverload + " test"},
		}
		for k, p := range []string{"kvrouter", "oracle"} {
			jobs = append(jobs, &job{sc: sc, policy: p, stats: []fleetsim.Stats{{Level: "all", P90: p90s[i][k], OutputTPS: tps[i][k], HitRatio: 0.1, BoundRatio: 0.5}}})
		}
	}
	return jobs
}

// TestSweepReport: shared-prefix-overload's acceptance line keeps its verdict and lists the
// sweep's spreads; the sweep's table has a row per working set, in order,
// with each policy's p90 and the spreads, and a column only for the
// policies the sweep ran.
func TestSweepReport(t *testing.T) {
	jobs := sweepJobs([][2]float64{{80, 40}, {90, 60}, {100, 90}}, [][2]float64{{1000, 2000}, {1000, 1500}, {1000, 1100}})
	lines := acceptance(jobs)
	if len(lines) != 1 {
		t.Fatalf("acceptance: %q, want one line for shared-prefix-overload", lines)
	}
	for _, want := range []string{"spread ×2.00", "**FAILS**", "×1.50 at 256 groups, ×1.11 at 512 groups"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("acceptance line %q lacks %q", lines[0], want)
		}
	}
	var b strings.Builder
	writeSweep(&b, jobs, []string{"kvrouter", "kvrouter-exact", "oracle"})
	got := b.String()
	if strings.Contains(got, "kvrouter-exact") {
		t.Errorf("the sweep table has a column for a policy it did not run:\n%s", got)
	}
	rows := []string{
		"| 128 | 1.25, 0.00 | 50.0% | 80.0 s (10.0%) | 40.0 s (10.0%) | ×2.00, ×2.00 |",
		"| 256 | 2.50, 0.00 | 50.0% | 90.0 s (10.0%) | 60.0 s (10.0%) | ×1.50, ×1.50 |",
		"| 512 | 5.00, 0.00 | 50.0% | 100.0 s (10.0%) | 90.0 s (10.0%) | ×1.11, ×1.10 |",
	}
	at := 0
	for _, r := range rows {
		i := strings.Index(got[at:], r)
		if i < 0 {
			t.Fatalf("sweep table lacks, in order, %q:\n%s", r, got)
		}
		at += i
	}
	if strings.Count(got, "## shared-prefix-overload as the working set grows") != 1 {
		t.Errorf("want one sweep section for one output length:\n%s", got)
	}
}

// levelJob is a job of one request per level of sc, with these TTFTs.
func levelJob(sc *scenario, policy string, ttfts ...float64) *job {
	res := &fleetsim.Result{}
	for _, ttft := range ttfts {
		res.Outcomes = append(res.Outcomes, fleetsim.Outcome{Arrival: 1, First: 1 + ttft, Finish: 2 + ttft})
	}
	return &job{sc: sc, policy: policy, res: res, stats: []fleetsim.Stats{{Level: "all", P90: ttfts[len(ttfts)-1], OutputTPS: 1}}}
}

// TestPreciseLineCountsBlocks: over six seeds, the line counts the blocks
// of three in which kvrouter's p90 at its worst level is at or under
// precise's.
func TestPreciseLineCountsBlocks(t *testing.T) {
	w := &fleetsim.Workload{Name: sharedPrefix + " test", Levels: []fleetsim.Level{{Name: "3"}, {Name: "10"}}, Requests: []fleetsim.Request{{Level: 0}, {Level: 1}}}
	var kv, pr, sh []*job
	for seed := 1; seed <= 6; seed++ {
		sc := &scenario{group: sharedPrefix, cfg: fleetsim.Config{Seed: uint64(seed)}, w: w, noise: true}
		slow := 2.0 // kvrouter's level 10: slower than precise under seeds 4-6 only
		if seed > 3 {
			slow = 2.5
		}
		shifted := 2.2 // precise scraped later, level 10: slower under seeds 1-3 only
		if seed > 3 {
			shifted = 2.0
		}
		kv, pr = append(kv, levelJob(sc, "kvrouter", 1, slow)), append(pr, levelJob(sc, "llm-d-precise", 1, 2.1))
		sh = append(sh, levelJob(sc, fleetsim.PreciseShifted, 1.1, shifted))
	}
	line := preciseLine(w.Name, kv, pr, sh, nil)
	for _, want := range []string{
		"seeds 1–6 pooled", "worst level 10", "**FAILS**", "kvrouter at or under precise at 1 of 2 levels",
		"at that level kvrouter's p90, pooled over each block of 3 seeds, is at or under precise's in 1 of 2 blocks",
		"against itself: ×1.048, worst level 3 ×1.100, at kvrouter's worst level ×1.048, at or under precise at 0 of 2 levels, at kvrouter's worst level in 1 of 2 blocks",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("preciseLine = %q, lacks %q", line, want)
		}
	}
}

// TestPreciseLineShowsTheNoise: the line comparing kvrouter with llm-d
// precise keeps its verdict and adds precise scraped half an interval
// later against precise, at its own worst level; the shifted runs appear
// in no table and count in no spread.
func TestPreciseLineShowsTheNoise(t *testing.T) {
	w := &fleetsim.Workload{Name: sharedPrefix + " test", Levels: []fleetsim.Level{{Name: "3"}, {Name: "10"}}, Requests: []fleetsim.Request{{Level: 0}, {Level: 1}}}
	sc := &scenario{group: sharedPrefix, cfg: fleetsim.Config{Seed: 1}, w: w, noise: true}
	kv, pr, sh := levelJob(sc, "kvrouter", 1, 2.2), levelJob(sc, "llm-d-precise", 1, 2), levelJob(sc, fleetsim.PreciseShifted, 1.3, 2)
	or := levelJob(sc, "oracle", 0.5, 2.1)
	line := preciseLine(w.Name, []*job{kv}, []*job{pr}, []*job{sh}, []*job{or})
	for _, want := range []string{"worst level 10, 2.200 s vs 2.000 s (×1.100)", "**FAILS**", "kvrouter at or under precise at 1 of 2 levels", "the oracle at that level ×1.050 of llm-d precise", "against itself: ×1.000, worst level 3 ×1.300, at kvrouter's worst level ×1.000, at or under precise at 1 of 2 levels"} {
		if !strings.Contains(line, want) {
			t.Errorf("preciseLine = %q, lacks %q", line, want)
		}
	}
	if strings.Contains(line, "blocks") {
		t.Errorf("preciseLine = %q counts blocks of seeds over one seed", line)
	}
	jobs := []*job{kv, pr, sh}
	if got := policyOrder(jobs); strings.Join(got, ",") != "kvrouter,llm-d-precise" {
		t.Errorf("policyOrder = %v, want the shifted runs left out", got)
	}
	sh.stats[0].P90 = 100
	if sp := spreadOf(map[string]*job{"kvrouter": kv, "llm-d-precise": pr, fleetsim.PreciseShifted: sh}); sp.hi != 2.2 {
		t.Errorf("spread up to %v, want 2.2: the shifted runs left out", sp.hi)
	}
}

// TestPreciseLineOneLevel: a run of one level (a Mooncake replay) is its
// own worst level, and the line counts no levels.
func TestPreciseLineOneLevel(t *testing.T) {
	w := &fleetsim.Workload{Name: "mooncake test", Levels: []fleetsim.Level{{Name: "1x"}}, Requests: []fleetsim.Request{{Level: 0}}}
	sc := &scenario{group: conversation, cfg: fleetsim.Config{Seed: 1}, w: w}
	line := preciseLine(w.Name, []*job{levelJob(sc, "kvrouter", 1)}, []*job{levelJob(sc, "llm-d-precise", 2)}, nil, nil)
	if !strings.Contains(line, "worst level 1x, 1.000 s vs 2.000 s (×0.500)") || !strings.Contains(line, "**holds**") {
		t.Errorf("preciseLine = %q, want level 1x at ×0.500, holds", line)
	}
	if strings.Contains(line, "levels") {
		t.Errorf("preciseLine = %q counts the levels of a one-level run", line)
	}
}
