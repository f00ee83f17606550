package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// The P/D comparison (prefill-decode): one fleet of pdPods pods, aggregated (every pod
// serves whole requests) or disaggregated into pdPrefill prefill pods and
// the rest decode pods, the same GPUs either way, under kvrouter with the
// threshold at each of pdThresholds.
const (
	pdPods = 8
	// pdPrefill is the prefill pods of the P/D fleet by default (-pd-
	// prefill): half. The prompts are ~30× the outputs, so prefill is most
	// of the GPU time, yet the decode pods carry the whole fleet's batch:
	// fewer of them and their inter-token latency passes the aggregated
	// fleet's, fewer prefill pods and the prompts queue (-workloads
	// prefill-decode -pd-prefill N shows both).
	pdPrefill = 4
	// pdMooncakeMinutes is the conversation trace's arrivals replayed, at
	// their own pace.
	pdMooncakeMinutes = 10
	// pdSharedQPS and pdSharedSeconds are the shared-prefix workload's one
	// stage, sent open loop.
	pdSharedQPS, pdSharedSeconds = 20, 60
)

// pdThresholds are the P/D thresholds swept, in tokens: hop whenever the
// decode pod lacks any of the prompt, the router's default, past the
// shared-prefix workload's 1,200-token questions, and never.
var pdThresholds = []int{0, 512, 2048, math.MaxInt}

// pdScenarios is prefill-decode: the Mooncake conversation trace and the shared-
// prefix workload, each on the aggregated fleet and the P/D fleet at
// every threshold, under kvrouter only.
func pdScenarios(o options, h *blockhash.Hasher, base fleetsim.Config) ([]*scenario, error) {
	minutes, seconds := float64(pdMooncakeMinutes), float64(pdSharedSeconds)
	if o.quick {
		minutes, seconds = 2, 15
	}
	mc, err := readTrace(o, h, "conversation", fmt.Sprintf("%s, mooncake conversation, %g min", prefillDecode, minutes), minutes)
	if err != nil {
		return nil, err
	}
	sp := fleetsim.PublishedSharedPrefix()
	sp.Output, sp.Seed = 230, o.seed // the output observed live: prompts 31× as long
	sp.WarmupQPS, sp.Warmup, sp.Stages, sp.Durations, sp.StageSeconds = 0, 0, []float64{pdSharedQPS}, nil, seconds
	shared := sp.Generate(fmt.Sprintf("%s, shared prefix, %d QPS", prefillDecode, pdSharedQPS), h)
	var out []*scenario
	for _, w := range []*fleetsim.Workload{mc, shared} {
		cfg := base
		cfg.Pods = pdPods
		bound := fleetsim.BoundHits(w, cfg.Pods*cfg.Blocks)
		out = append(out, &scenario{group: prefillDecode, cfg: cfg, w: w, bound: bound, only: []string{"kvrouter"}, topology: "aggregated"})
		for _, t := range pdThresholds {
			c := cfg
			c.Roles = pdRoles(o.pdPrefill)
			c.PDThreshold = t
			out = append(out, &scenario{group: prefillDecode, cfg: c, w: w, bound: bound, only: []string{"kvrouter"}, topology: pdName(t)})
		}
	}
	return out, nil
}

// pdRoles is the P/D fleet's roles: prefill prefill pods, then decode.
func pdRoles(prefill int) []kvpod.Role {
	roles := make([]kvpod.Role, pdPods)
	for i := range roles {
		roles[i] = kvpod.RoleDecode
		if i < prefill {
			roles[i] = kvpod.RolePrefill
		}
	}
	return roles
}

// pdName names the P/D fleet at threshold t.
func pdName(t int) string {
	if t == math.MaxInt {
		return "P/D, never hop"
	}
	return fmt.Sprintf("P/D, threshold %d", t)
}

// pdRuns is prefill-decode's jobs of one workload, in scenario order.
type pdRuns struct {
	w    *fleetsim.Workload
	jobs []*job
}

// pdWorkloads groups prefill-decode's kvrouter jobs by workload.
func pdWorkloads(jobs []*job) []pdRuns {
	var out []pdRuns
	for _, j := range jobs {
		if j.sc.group != prefillDecode || j.policy != "kvrouter" {
			continue
		}
		if len(out) == 0 || out[len(out)-1].w != j.sc.w {
			out = append(out, pdRuns{w: j.sc.w})
		}
		out[len(out)-1].jobs = append(out[len(out)-1].jobs, j)
	}
	return out
}

// writePD writes prefill-decode: per workload, each fleet's time to first token,
// inter-token latency and throughput, and its plots.
func writePD(b *strings.Builder, jobs []*job) {
	runs := pdWorkloads(jobs)
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## %s: disaggregation against aggregated serving\n\n", prefillDecode)
	prefill := 0
	for _, r := range runs[0].jobs[len(runs[0].jobs)-1].sc.cfg.Roles {
		if r == kvpod.RolePrefill {
			prefill++
		}
	}
	fmt.Fprintf(b, pdText, pdPods, pdPods, prefill, pdPods-prefill)
	for _, r := range runs {
		cfg := r.jobs[0].sc.cfg
		fmt.Fprintf(b, "\n### %s\n\n%d requests, %d pods × %d blocks of %d tokens, KV link %.0f GB/s + %v a transfer.\n\n",
			r.w.Name, len(r.w.Requests), cfg.Pods, cfg.Blocks, cfg.BlockSize, cfg.KVLinkBandwidth/1e9, cfg.KVLinkLatency)
		b.WriteString("| fleet | prefill hops | TTFT p50 | p90 | p99 | mean | ITL mean | output tok/s | hit ratio | KV transfer mean | preemptions |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, j := range r.jobs {
			all := j.all()
			fmt.Fprintf(b, "| %s | %d of %d | %s | %s | %s | %s | %.1f ms | %.0f | %.1f%% | %.1f ms | %d |\n",
				j.sc.topology, all.Hops, all.Requests, secs(all.P50), secs(all.P90), secs(all.P99), secs(all.Mean),
				1000*all.ITL, all.OutputTPS, 100*all.HitRatio, 1000*all.Transfer, j.res.Preemptions)
		}
		b.WriteString("\n")
		for _, m := range pdMetrics {
			f := pdPlotFile(r.w, m.suffix)
			fmt.Fprintf(b, "%s by percentile ([SVG](%s.svg)): ![%s](%s.png)\n\n", m.what, f, m.what, f)
		}
	}
}

const pdText = `Each fleet is %d pods of the 8B model, kvrouter routing: aggregated, %d pods serving
whole requests; P/D, %d prefill and %d decode pods, the same GPUs. The router picks the
decode pod by cache and load; when that pod lacks at least the threshold's tokens of the
prompt, a prefill pod (picked by the cost of the prompt it lacks) computes the prompt,
and the decode pod pulls the KV of the blocks it lacks over the link, then computes the
last token and decodes. Time to first token runs to the decode pod's first token. A
transfer costs the link's latency plus the KV bytes over its bandwidth: the 8B model's
128 KiB a token (32 layers × 8 KV heads × 128 × 2 × 2 bytes) over one 400 Gb/s RDMA NIC
per GPU. "Never hop" leaves the prefill pods idle: only the decode pods serve. Prefill
hops and the hit ratio count the prompts the prefill pods computed, with the prefill
pod's cache; ITL is each request's (last token − first) / (output − 1), averaged.
`

// pdMetrics are prefill-decode's plots: a per-request metric by percentile, each
// fleet a line.
var pdMetrics = []struct {
	suffix, what, axis string
	value              func(o fleetsim.Outcome) (float64, bool)
}{
	{"ttft", "TTFT", "TTFT (s)", ttftOf},
	{"itl", "inter-token latency", "mean ITL of a request (ms)", func(o fleetsim.Outcome) (float64, bool) {
		return 1000 * (o.Finish - o.First) / float64(o.Output-1), o.Output > 1
	}},
}

// pdPlotFile is the base name of the plot of w's metric of suffix.
func pdPlotFile(w *fleetsim.Workload, suffix string) string {
	return workloadFile(prefillDecode, w.Name) + "-" + suffix
}

// writePDPlots writes prefill-decode's plots to dir.
func writePDPlots(dir string, jobs []*job) error {
	for _, r := range pdWorkloads(jobs) {
		for _, m := range pdMetrics {
			c := percentileChart(r.w.Name+": "+m.what+" by percentile", m.axis)
			for _, j := range r.jobs {
				c.series = append(c.series, percentileSeries(j.sc.topology, m.value, j.res))
			}
			if err := c.save(filepath.Join(dir, pdPlotFile(r.w, m.suffix))); err != nil {
				return err
			}
		}
	}
	return nil
}
