package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// The heterogeneous fleets (heterogeneous-speeds): fleets whose second half runs at half the
// speed (an older GPU, or a larger model's pods behind the same name),
// each workload under heteroSeeds seeds, kvrouter pricing every pod at the
// configured speed of the fast ones (the single global figure an operator
// measures on one pod) and kvrouter-mean at the fleet's mean speed, against
// kvrouter-learned, pricing each pod at the speed it learns from the pods'
// counters, the fast pods' figure its prior, and the oracle, which knows
// every pod's speed; llm-d's precise scheduler, approximate, least-loaded
// and random run beside them, the peers kvrouter (as shipped: learning
// speeds) must beat here too. Two workloads: the
// Mooncake conversation trace (long prompts, little reuse: prefill is
// most of the work), on heteroPods of the 8B pods, its first
// heteroMinutes of arrivals compressed heteroCompress×; and the
// shared-prefix workload (prompts of a few cached system prompts:
// affinity is most of the work), on heteroSharedPods published pods, in
// open-loop stages of heteroQPS.
const (
	heteroSeeds      = 3
	heteroSlow       = 0.5
	heteroPods       = 8
	heteroMinutes    = 10
	heteroCompress   = 1.5
	heteroSharedPods = 4
	heteroSeconds    = 60 // each shared-prefix stage's
)

// heteroQPS are the shared-prefix workload's stages, in requests/s.
var heteroQPS = []float64{8, 12}

// heteroPolicies are the policies heterogeneous-speeds compares, in the report's order.
var heteroPolicies = []string{"kvrouter", "kvrouter-mean", "kvrouter-learned", "kvrouter-exact", "llm-d-precise", "approximate", "least-loaded", "random", "oracle"}

// heteroRepeatPolicies are the policies heterogeneous-speeds runs under the seeds past
// heteroSeeds that -seeds asks for: the ones its acceptance lines compare.
var heteroRepeatPolicies = []string{"kvrouter", "kvrouter-mean", "kvrouter-learned", "kvrouter-exact", "llm-d-precise"}

// heteroShipped is the kvrouter policy of heterogeneous-speeds that routes as kvrouter
// ships (routing.learn_prefill_speeds defaults to true): the one the
// acceptance compares with llm-d's precise scheduler.
const heteroShipped = "kvrouter-learned"

// heteroScenarios is heterogeneous-speeds: each workload under seeds seed, seed+1, …:
// heteroSeeds of them, or o.seeds when more (heteroRepeatPolicies only
// past heteroSeeds). The Mooncake trace's requests are the same under
// every seed; the seed draws the policies' tie-breaks.
func heteroScenarios(o options, h *blockhash.Hasher, base fleetsim.Config) ([]*scenario, error) {
	minutes, seconds := float64(heteroMinutes), float64(heteroSeconds)
	if o.quick {
		minutes, seconds = 2, 15
	}
	mc, err := readTrace(o, h, "conversation", "conversation", minutes)
	if err != nil {
		return nil, err
	}
	mc = mc.Compress(heteroCompress)
	seeds := max(heteroSeeds, o.seeds)
	only := func(k int) []string {
		if k < heteroSeeds {
			return heteroPolicies
		}
		return heteroRepeatPolicies
	}
	var out []*scenario
	for k := range seeds {
		seed := o.seed + uint64(k)
		cfg := base
		cfg.Pods, cfg.Seed = heteroPods, seed
		cfg.Speeds = heteroSpeeds(cfg.Pods)
		w := *mc
		w.Name = fmt.Sprintf("%s, mooncake conversation %g min %gx, seed %d", heterogeneousSpeeds, minutes, heteroCompress, seed)
		out = append(out, &scenario{group: heterogeneousSpeeds, cfg: cfg, w: &w, only: only(k)})
	}
	for k := range seeds {
		seed := o.seed + uint64(k)
		sp := fleetsim.PublishedSharedPrefix()
		sp.Groups, sp.Output, sp.Seed = sharedGroups, 230, seed
		sp.WarmupQPS, sp.Warmup, sp.Stages, sp.Durations, sp.StageSeconds = 0, 0, heteroQPS, nil, seconds
		cfg := base
		publishedPod(&cfg)
		cfg.Pods, cfg.Seed = heteroSharedPods, seed
		cfg.Speeds = heteroSpeeds(cfg.Pods)
		w := sp.Generate(fmt.Sprintf("%s, shared prefix, seed %d", heterogeneousSpeeds, seed), h)
		out = append(out, &scenario{group: heterogeneousSpeeds, cfg: cfg, w: w, only: only(k)})
	}
	return out, nil
}

// heteroSpeeds is n pods' speeds: the first half 1, the rest heteroSlow.
func heteroSpeeds(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 1
		if i >= n/2 {
			s[i] = heteroSlow
		}
	}
	return s
}

// ttfts is the times to first token of res's finished requests.
func ttfts(res *fleetsim.Result) []float64 {
	var out []float64
	for _, o := range res.Outcomes {
		if o.First > 0 && !o.TimedOut {
			out = append(out, o.First-o.Arrival)
		}
	}
	return out
}

// ttftSummary is a sample's p90 and mean, and its size.
type ttftSummary struct {
	p50, p90, mean float64
	n              int
}

func summarize(vs []float64) ttftSummary {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return ttftSummary{p50: percentile(vs, 50), p90: percentile(vs, 90), mean: sum / math.Max(float64(len(vs)), 1), n: len(vs)}
}

// heteroWorkload is the workload of a heterogeneous-speeds scenario, its
// seed left out.
func heteroWorkload(sc *scenario) string {
	name := sc.w.Name
	if i := strings.LastIndex(name, ", seed "); i >= 0 {
		name = name[:i]
	}
	return name
}

// writeHetero writes heterogeneous-speeds: per workload, each seed's and the pooled TTFT
// of every policy, the acceptance line, and how kvrouter-learned's
// estimates converged.
func writeHetero(b *strings.Builder, jobs []*job) {
	workloads, by := heteroGroups(jobs)
	if len(workloads) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## %s: learned prefill speeds against one global figure\n\n", heterogeneousSpeeds)
	b.WriteString(heteroText)
	for _, name := range workloads {
		var cfg fleetsim.Config
		for _, js := range by[name] {
			cfg = js[0].sc.cfg
		}
		fmt.Fprintf(b, "\n### %s\n\n%d pods × %d blocks, prefill %.0f tokens/s at speed 1; speeds %v.\n\n", name, cfg.Pods, cfg.Blocks, cfg.PrefillTokensPerSecond, cfg.Speeds)
		b.WriteString("| seed | policy | requests | TTFT p50 | p90 | mean | hit ratio | output tok/s |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range heteroPolicies {
			for _, j := range by[name][p][:min(heteroSeeds, len(by[name][p]))] {
				all := j.all()
				s := summarize(ttfts(j.res))
				fmt.Fprintf(b, "| %d | %s | %d | %s | %s | %s | %.1f%% | %.0f |\n", j.sc.cfg.Seed, p, s.n, secs(s.p50), secs(s.p90), secs(s.mean), 100*all.HitRatio, all.OutputTPS)
			}
		}
		pooled, blocks := heteroPools(by[name])
		for _, p := range heteroPolicies {
			if len(pooled[p]) > 0 {
				s := summarize(pooled[p])
				fmt.Fprintf(b, "| pooled (%d seeds) | %s | %d | %s | %s | %s | | |\n", len(by[name][p]), p, s.n, secs(s.p50), secs(s.p90), secs(s.mean))
			}
		}
		if len(by[name][heteroShipped]) > heteroSeeds {
			fmt.Fprintf(b, "\nSeeds past the first %d ran %s only, and are pooled only.\n", heteroSeeds, strings.Join(heteroRepeatPolicies, ", "))
		}
		for _, line := range learnedLines(pooled, blocks) {
			fmt.Fprintf(b, "\n%s.\n", line)
		}
		f := heteroPlotFile(name)
		fmt.Fprintf(b, "\nTTFT by percentile, seeds pooled ([SVG](%s.svg)): ![TTFT by percentile](%s.png)\n", f, f)
		if ls := by[name]["kvrouter-learned"]; len(ls) > 0 {
			writeConvergence(b, ls[0])
		}
	}
}

// heteroPlotFile is the base name of the TTFT plot of the
// heterogeneous-speeds workload name (heteroWorkload).
func heteroPlotFile(name string) string { return workloadFile(heterogeneousSpeeds, name) + "-ttft" }

// writeHeteroPlots writes heterogeneous-speeds' plots to dir: per workload, each policy's
// TTFT by percentile, its seeds pooled.
func writeHeteroPlots(dir string, jobs []*job) error {
	workloads, by := heteroGroups(jobs)
	for _, name := range workloads {
		c := percentileChart(name+", seeds pooled: TTFT by percentile", "TTFT (s)")
		for _, p := range heteroPolicies {
			var rs []*fleetsim.Result
			for _, j := range by[name][p] {
				rs = append(rs, j.res)
			}
			if len(rs) > 0 {
				c.series = append(c.series, percentileSeries(p, ttftOf, rs...))
			}
		}
		if err := c.save(filepath.Join(dir, heteroPlotFile(name))); err != nil {
			return err
		}
	}
	return nil
}

// heteroGroups is the heterogeneous-speeds jobs by workload (heteroWorkload) and policy,
// in seed order, and the workloads in the order they ran.
func heteroGroups(jobs []*job) (workloads []string, by map[string]map[string][]*job) {
	by = map[string]map[string][]*job{}
	for _, j := range jobs {
		if j.sc.group != heterogeneousSpeeds {
			continue
		}
		name := heteroWorkload(j.sc)
		if by[name] == nil {
			by[name] = map[string][]*job{}
			workloads = append(workloads, name)
		}
		by[name][j.policy] = append(by[name][j.policy], j)
	}
	return workloads, by
}

// heteroPools is the TTFTs of each policy's runs of one
// heterogeneous-speeds workload (by
// policy, in seed order), pooled over all its seeds, and over each block
// of seedBlock successive seeds.
func heteroPools(by map[string][]*job) (pooled map[string][]float64, blocks map[string][][]float64) {
	pooled, blocks = map[string][]float64{}, map[string][][]float64{}
	for p, js := range by {
		for i, j := range js {
			t := ttfts(j.res)
			pooled[p] = append(pooled[p], t...)
			if i%seedBlock == 0 {
				blocks[p] = append(blocks[p], nil)
			}
			blocks[p][i/seedBlock] = append(blocks[p][i/seedBlock], t...)
		}
	}
	return pooled, blocks
}

// learnedLines compares kvrouter-learned's pooled TTFT with each global
// figure's (kvrouter, kvrouter-mean), and then kvrouter-exact's with
// kvrouter's: what knowing every speed exactly gives, the most learning
// can. pooled is every policy's pooled TTFTs; blocks, pooled over each
// block of seedBlock seeds: with more than one block, each line also
// counts the blocks where the policy's p90, and its mean, are lower.
func learnedLines(pooled map[string][]float64, blocks map[string][][]float64) []string {
	var out []string
	line := func(what, p, global string) {
		g, l := pooled[global], pooled[p]
		if len(g) == 0 || len(l) == 0 {
			return
		}
		sg, sl := summarize(g), summarize(l)
		ok := sl.p90 < sg.p90 && sl.mean < sg.mean
		by := ""
		if n := min(len(blocks[p]), len(blocks[global])); n > 1 {
			p90, mean := 0, 0
			for i := range n {
				bl, bg := summarize(blocks[p][i]), summarize(blocks[global][i])
				if bl.p90 < bg.p90 {
					p90++
				}
				if bl.mean < bg.mean {
					mean++
				}
			}
			by = fmt.Sprintf("; pooled over each block of %d seeds, its p90 is lower in %d of %d blocks and its mean in %d", seedBlock, p90, n, mean)
		}
		out = append(out, fmt.Sprintf("%s against %s's global figure, pooled over the seeds: TTFT p90 %s against %s (×%.2f), mean %s against %s (×%.2f): %s%s",
			what, global, secs(sl.p90), secs(sg.p90), sl.p90/sg.p90, secs(sl.mean), secs(sg.mean), sl.mean/sg.mean, map[bool]string{true: "**better**", false: "**not better**"}[ok], by))
	}
	for _, global := range []string{"kvrouter", "kvrouter-mean"} {
		line("Learned speeds", "kvrouter-learned", global)
	}
	line("Exact speeds (kvrouter-exact, the most learning can give)", "kvrouter-exact", "kvrouter")
	return out
}

// heteroAcceptance is, for each heterogeneous-speeds workload, named, kvrouter as shipped
// against llm-d's precise scheduler (preciseLine) and learnedLines.
func heteroAcceptance(jobs []*job) []string {
	workloads, by := heteroGroups(jobs)
	var out []string
	for _, name := range workloads {
		if kv, pr := by[name][heteroShipped], by[name]["llm-d-precise"]; len(kv) > 0 && len(pr) > 0 { // preciseLine pools the seeds both ran
			out = append(out, preciseLine(name+", kvrouter as shipped (learned speeds)", kv, pr, nil, by[name]["oracle"]))
		}
		for _, line := range learnedLines(heteroPools(by[name])) {
			out = append(out, name+": "+line)
		}
	}
	return out
}

// writeConvergence writes the speeds kvrouter-learned priced each pod at
// over j's run, every heteroSampleEvery seconds, against the pod's
// configured speed.
func writeConvergence(b *strings.Builder, j *job) {
	cfg := j.sc.cfg
	fmt.Fprintf(b, "\nkvrouter-learned's prefill speed of each pod (tokens/s at no context) over %s, against its configured speed (in parentheses); the last column is the slow pods' mean estimate over the fast pods'.\n\n", j.sc.w.Name)
	b.WriteString("| time (s) |")
	for i := range cfg.Pods {
		fmt.Fprintf(b, " pod %d (%.0f) |", i, cfg.PrefillTokensPerSecond*cfg.Speeds[i])
	}
	b.WriteString(" slow / fast |\n|---:|")
	b.WriteString(strings.Repeat("---:|", cfg.Pods+1) + "\n")
	byTime := map[float64][]float64{}
	var times []float64
	for _, s := range j.res.Speeds {
		if _, ok := byTime[s.At]; !ok {
			times = append(times, s.At)
			byTime[s.At] = make([]float64, cfg.Pods)
		}
		byTime[s.At][s.Pod] = s.TokensPerSecond
	}
	next := 0.0
	for _, at := range times {
		if at < next {
			continue
		}
		next = at + heteroSampleEvery
		fmt.Fprintf(b, "| %.0f |", at)
		var fast, slow, nf, ns float64
		for i, v := range byTime[at] {
			fmt.Fprintf(b, " %.0f |", v)
			if cfg.Speeds[i] == 1 {
				fast, nf = fast+v, nf+1
			} else {
				slow, ns = slow+v, ns+1
			}
		}
		fmt.Fprintf(b, " %.2f |\n", slow/ns/(fast/nf))
	}
}

// heteroSampleEvery is the spacing of the convergence table's rows.
const heteroSampleEvery = 30.0

const heteroText = `Fleets whose second half runs at half the speed: every step of a slow pod takes twice as
long, prefill and decode. Each pod's simulated /metrics counts vLLM's prompt tokens,
prefix-cache queries and hits, and prefill time. kvrouter prices every pod at the fast
pods' speed, the single figure an operator measures on one pod
(routing.learn_prefill_speeds: false, or pods without the counters), and kvrouter-mean at
the fleet's mean speed (3/4 of the fast pods'), the figure an operator who knew the mix
would set; kvrouter-learned learns each pod's speed from its counters through the router's
own estimator (router/fleet/speed.go), that same figure its prior, as kvrouter ships
(learn_prefill_speeds is on by default); kvrouter-exact is told every pod's speed at the
start, the most that learning can give; the oracle knows every pod's speed and queue
exactly. llm-d's precise scheduler, approximate, least-loaded and random run the same
fleets: the acceptance compares kvrouter as shipped with precise. The Mooncake
conversation trace (long prompts, little reuse) is prefill-bound: there the speeds decide
where a prompt is computed soonest. The shared-prefix workload (75 groups of 6,000-token
system prompts, 230 output tokens, open-loop stages of 8 and 12 requests/s) is
affinity-bound: a request goes where its group's prefix is cached whatever the pod's
speed. A learned speed is what a token costs the pod under its traffic, step overheads and
the decodes sharing its steps included, so it sits below the configured speed; what
matters to routing is that the slow pods are learned at about half the fast ones.
`
