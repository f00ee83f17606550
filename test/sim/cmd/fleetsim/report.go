package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// plotSet is one figure family: each policy's stats at each x.
type plotSet struct {
	file, title, xLabel string
	xs                  []float64
	stats               map[string][]fleetsim.Stats // policy → one per x
}

// plotSets groups the jobs' results into figures: per stage for the
// shared-prefix workloads, per compression factor for each Mooncake trace.
func plotSets(jobs []*job) []*plotSet {
	var sets []*plotSet
	byName := map[string]*plotSet{}
	for _, j := range jobs {
		sc := j.sc
		if sc.only != nil || sc.sweep {
			continue // repeats under other seeds: acceptance only; the sweep: its table
		}
		switch sc.group {
		case sharedPrefix, sharedPrefixOverload:
			ps := byName[sc.w.Name]
			if ps == nil {
				ps = &plotSet{file: fmt.Sprintf("%s-%d", sc.group, sc.output), title: sc.w.Name, xLabel: "published QPS of the stage (requests/s)", stats: map[string][]fleetsim.Stats{}}
				for _, l := range sc.w.Levels {
					if x, err := strconv.ParseFloat(l.Name, 64); err == nil {
						ps.xs = append(ps.xs, x)
					}
				}
				byName[sc.w.Name] = ps
				sets = append(sets, ps)
			}
			for _, st := range j.stats {
				if _, err := strconv.ParseFloat(st.Level, 64); err == nil {
					ps.stats[j.policy] = append(ps.stats[j.policy], st)
				}
			}
		case cacheOverload:
			if sc.base != nil {
				continue // the other seeds: pooled in the report's tables
			}
			ps := byName[sc.w.Name]
			if ps == nil {
				ps = &plotSet{file: cacheOverload + "-" + strconv.Itoa(sc.overload.users), title: sc.w.Name + ", seed " + strconv.FormatUint(sc.cfg.Seed, 10), xLabel: "stage (requests/s, constant rate)", stats: map[string][]fleetsim.Stats{}}
				for _, l := range sc.w.Levels {
					x, _ := strconv.ParseFloat(l.Name, 64)
					ps.xs = append(ps.xs, x)
				}
				byName[sc.w.Name] = ps
				sets = append(sets, ps)
			}
			ps.stats[j.policy] = j.stats[:len(j.stats)-1]
		case conversation:
			trace := strings.TrimSuffix(sc.w.Name, " "+sc.w.Levels[0].Name)
			ps := byName[trace]
			if ps == nil {
				ps = &plotSet{file: "mooncake-" + trace[strings.LastIndex(trace, " ")+1:], title: trace, xLabel: "arrival-time compression (×)", stats: map[string][]fleetsim.Stats{}}
				byName[trace] = ps
				sets = append(sets, ps)
			}
			x, _ := strconv.ParseFloat(strings.TrimSuffix(sc.w.Levels[0].Name, "x"), 64)
			if len(ps.xs) == 0 || ps.xs[len(ps.xs)-1] != x {
				ps.xs = append(ps.xs, x)
			}
			ps.stats[j.policy] = append(ps.stats[j.policy], j.all())
		}
	}
	return sets
}

// plotMetrics are the metrics plotted for each plotSet: a file suffix,
// the report's and the title's name of the metric, its axis with unit.
var plotMetrics = []struct {
	suffix, what, axis string
	value              func(fleetsim.Stats) float64
}{
	{"ttft-p90", "TTFT p90", "TTFT p90 (s)", func(s fleetsim.Stats) float64 { return s.P90 }},
	{"ttft-mean", "TTFT mean", "TTFT mean (s)", func(s fleetsim.Stats) float64 { return s.Mean }},
	{"output-tps", "output throughput", "output throughput (tokens/s)", func(s fleetsim.Stats) float64 { return s.OutputTPS }},
	{"hit-ratio", "prompt block hit ratio", "prompt block hit ratio (%)", func(s fleetsim.Stats) float64 { return 100 * s.HitRatio }},
}

// writePlots writes each plotSet's metrics to dir, a PNG and an SVG each,
// named plotFile(ps, metric).
func writePlots(dir string, jobs []*job) error {
	policies := policyOrder(jobs)
	for _, ps := range plotSets(jobs) {
		for _, m := range plotMetrics {
			c := &chart{title: ps.title + ": " + m.what, xLabel: ps.xLabel, yLabel: m.axis, xs: ps.xs}
			for _, p := range policies {
				if ps.stats[p] == nil {
					continue // not run on this workload
				}
				s := series{name: p}
				for _, st := range ps.stats[p] {
					s.ys = append(s.ys, m.value(st))
				}
				c.series = append(c.series, s)
			}
			if err := c.save(filepath.Join(dir, plotFile(ps, m.suffix))); err != nil {
				return err
			}
		}
	}
	if err := writePDPlots(dir, jobs); err != nil {
		return err
	}
	return writeHeteroPlots(dir, jobs)
}

// plotFile is the base name, without extension, of ps's plot of the
// metric of suffix.
func plotFile(ps *plotSet, suffix string) string { return ps.file + "-" + suffix }

// policyOrder is the policies of jobs in the order they were asked for,
// but fleetsim.PreciseShifted, which only the acceptance lines show.
func policyOrder(jobs []*job) []string {
	var out []string
	seen := map[string]bool{fleetsim.PreciseShifted: true}
	for _, j := range jobs {
		if !seen[j.policy] {
			seen[j.policy] = true
			out = append(out, j.policy)
		}
	}
	return out
}

func writeReport(path string, o options, jobs []*job, wall time.Duration) error {
	var b strings.Builder
	policies := policyOrder(jobs)
	fmt.Fprintf(&b, "# kvrouter fleet simulation\n\n")
	fmt.Fprintf(&b, "`go run ./cmd/fleetsim -seed %d -seeds %d -shared-client %s -client-concurrency %d -client-timeout %v -shared-output %s -shared-qps-scale %g -pd-prefill %d` in test/sim (policies %s, workloads %s%s): %v wall on %d cores (GOMAXPROCS), %d runs, %d at a time.\n\n",
		o.seed, o.seeds, o.client, o.concurrency, o.timeout, o.outputs, o.qpsScale, o.pdPrefill, o.policies, o.workloads, map[bool]string{true: ", -quick"}[o.quick],
		wall.Round(time.Second), runtime.GOMAXPROCS(0), len(jobs), o.parallel)
	b.WriteString(setupText)
	b.WriteString("\n## Acceptance\n\n")
	for _, line := range slices.Concat(acceptance(jobs), overloadAcceptance(jobs, verdict), heteroAcceptance(jobs)) {
		fmt.Fprintf(&b, "- %s\n", line)
	}
	writePublished(&b, jobs)
	var last *scenario
	for _, j := range jobs {
		if j.sc != last && j.sc.only == nil && !j.sc.sweep && j.sc.group != prefillDecode && j.sc.group != cacheOverload {
			last = j.sc
			writeScenario(&b, jobs, j.sc, policies)
		}
	}
	writeSweep(&b, jobs, policies)
	writePD(&b, jobs)
	writeOverload(&b, jobs, policies)
	writeHetero(&b, jobs)
	b.WriteString("\n## Plots\n\n")
	for _, ps := range plotSets(jobs) {
		fmt.Fprintf(&b, "### %s (x: %s)\n\n", ps.title, ps.xLabel)
		for _, m := range plotMetrics {
			f := plotFile(ps, m.suffix)
			fmt.Fprintf(&b, "%s ([SVG](%s.svg)): ![%s](%s.png)\n\n", m.what, f, m.what, f)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeScenario(b *strings.Builder, jobs []*job, sc *scenario, policies []string) {
	fmt.Fprintf(b, "\n## %s\n\n%d pods × %d blocks of %d tokens, %d requests, event delay %v.\n\n",
		sc.w.Name, sc.cfg.Pods, sc.cfg.Blocks, sc.cfg.BlockSize, len(sc.w.Requests), sc.cfg.EventDelay)
	b.WriteString("| level | sim QPS | policy | TTFT p50 | p90 | p99 | mean | client wait p90 | timed out | output tok/s | hit ratio | global-LRU bound | fraction of bound | preemptions |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	byPolicy := map[string]*job{}
	for _, j := range jobs {
		if j.sc == sc {
			byPolicy[j.policy] = j
		}
	}
	for li := range len(sc.w.Levels) + 1 {
		for _, p := range policies {
			j := byPolicy[p]
			if j == nil {
				continue // a variant only another workload runs
			}
			st := j.stats[li]
			pre := ""
			if st.Level == "all" {
				pre = strconv.Itoa(j.res.Preemptions)
			}
			fmt.Fprintf(b, "| %s | %.1f | %s | %s | %s | %s | %s | %s | %d | %.0f | %.1f%% | %.1f%% | %.2f | %s |\n",
				st.Level, st.QPS, p, secs(st.P50), secs(st.P90), secs(st.P99), secs(st.Mean), secs(st.WaitP90), st.TimedOut,
				st.OutputTPS, 100*st.HitRatio, 100*st.BoundRatio, st.FracOfBound(), pre)
		}
	}
}

func secs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.3f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

// collapsed says a stage's p90 TTFT is a queue, not a prefill.
func collapsed(st fleetsim.Stats) bool { return st.P90 > 5 }

// seedBlock is how many successive seeds blockWins pools: as many as the
// acceptance pools by default.
const seedBlock = 3

// sharedShape checks the published shape of the shared-prefix benchmark:
// kvrouter sub-second at every stage, approximate collapsing at high load,
// random and least-loaded collapsing near 20 QPS.
func sharedShape(name string, by map[string]*job, mark func(bool) string) []string {
	var out []string
	worst := 0.0
	for _, st := range stages(by["kvrouter"]) {
		worst = max(worst, st.P90)
	}
	out = append(out, fmt.Sprintf("%s: kvrouter's worst stage TTFT p90 %s (want < 1 s): %s", name, secs(worst), mark(worst < 1)))
	for _, p := range []string{"approximate", "random", "least-loaded"} {
		if j := by[p]; j != nil {
			at := firstCollapse(j)
			q, _ := strconv.ParseFloat(at, 64)
			want, ok := "collapse at high load (published: 40)", at != "none" && q >= 30
			if p != "approximate" {
				want, ok = "collapse near 20", at != "none" && q >= 15 && q <= 25
			}
			out = append(out, fmt.Sprintf("%s: %s first collapses (stage TTFT p90 > 5 s) at published stage %s; want %s: %s", name, p, at, want, mark(ok)))
		}
	}
	return out
}

// spread is how far apart the policies of one scenario land.
type spread struct{ lo, hi, loTPS, hiTPS float64 }

func (s spread) p90() float64 { return s.hi / s.lo }

// spreadOf is the range of the policies' pooled TTFT p90 and output tok/s.
func spreadOf(by map[string]*job) spread {
	s := spread{lo: math.Inf(1), loTPS: math.Inf(1)}
	for p, k := range by {
		if p == fleetsim.PreciseShifted {
			continue // not one of the policies compared
		}
		all := k.all()
		s.lo, s.hi = min(s.lo, all.P90), max(s.hi, all.P90)
		s.loTPS, s.hiTPS = min(s.loTPS, all.OutputTPS), max(s.hiTPS, all.OutputTPS)
	}
	return s
}

// sweepRun is one working set of shared-prefix-overload: its scenario and
// its jobs by policy.
type sweepRun struct {
	sc *scenario
	by map[string]*job
}

// sweepOf is shared-prefix-overload's scenario base, then its sweep with
// the same output length, in order of working set.
func sweepOf(jobs []*job, base *scenario) []sweepRun {
	out := []sweepRun{{sc: base, by: map[string]*job{}}}
	for _, j := range jobs {
		sc := j.sc
		if sc == base {
			out[0].by[j.policy] = j
			continue
		}
		if !sc.sweep || sc.output != base.output {
			continue
		}
		if out[len(out)-1].sc != sc {
			out = append(out, sweepRun{sc: sc, by: map[string]*job{}})
		}
		out[len(out)-1].by[j.policy] = j
	}
	return out
}

// writeSweep writes, per output length, shared-prefix-overload at each
// working set: where the policies land as more groups than the fleet can
// cache share it. The first table carries the explanation.
func writeSweep(b *strings.Builder, jobs []*job, policies []string) {
	text := sweepText
	for _, j := range jobs {
		base := j.sc
		if base.group != sharedPrefixOverload || base.sweep || base.base != nil || j.policy != policies[0] {
			continue
		}
		runs := sweepOf(jobs, base)
		if len(runs) == 1 {
			continue
		}
		fmt.Fprintf(b, "\n## %s as the working set grows, %d output tokens\n\n", sharedPrefixOverload, base.output)
		b.WriteString(text)
		text = ""
		ran := slices.DeleteFunc(slices.Clone(policies), func(p string) bool { // the policies the sweep ran, not heterogeneous-speeds' alone
			return !slices.ContainsFunc(runs, func(r sweepRun) bool { return r.by[p] != nil })
		})
		b.WriteString("| groups | working set / fleet KV: by groups, sent | global-LRU bound |")
		for _, p := range ran {
			fmt.Fprintf(b, " %s p90 (hit ratio) |", p)
		}
		b.WriteString(" spread p90, output tok/s |\n|---:|---:|---:|")
		b.WriteString(strings.Repeat("---:|", len(ran)+1) + "\n")
		for _, r := range runs {
			var bound float64
			for _, k := range r.by {
				bound = k.all().BoundRatio
			}
			fmt.Fprintf(b, "| %d | %.2f, %.2f | %.1f%% |", r.sc.groups, r.sc.share, sentShare(r.sc), 100*bound)
			for _, p := range ran {
				k := r.by[p]
				if k == nil {
					b.WriteString(" |")
					continue
				}
				all := k.all()
				fmt.Fprintf(b, " %s (%.1f%%) |", secs(all.P90), 100*all.HitRatio)
			}
			sp := spreadOf(r.by)
			fmt.Fprintf(b, " ×%.2f, ×%.2f |\n", sp.p90(), sp.hiTPS/sp.loTPS)
		}
	}
}

// sentShare is the prompt tokens sc's requests hold between them, each
// distinct block once, over the fleet's KV: the working set the client
// actually sends.
func sentShare(sc *scenario) float64 {
	seen := map[uint64]bool{}
	for _, r := range sc.w.Requests {
		for _, h := range r.Hashes {
			seen[h] = true
		}
	}
	return float64(len(seen)*sc.cfg.BlockSize) / float64(sc.cfg.Pods*sc.cfg.Blocks*sc.cfg.BlockSize)
}
