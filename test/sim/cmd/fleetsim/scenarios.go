package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// The scaling of the published runs to what 2 cores simulate in minutes.
const (
	sharedPods      = 4          // the llm-d run had 8
	sharedGroups    = 75         // of 150: the working set halves with the fleet
	sharedOutputs   = "1000,230" // as configured, and as the configuration's comment observed live
	sharedQPSScale  = 0.5        // simulated QPS per published QPS: half the fleet of the same pods
	capacityShare   = 0.73       // working set / fleet KV capacity, published
	overloadShare   = 1.25
	mooncakePods    = 8
	mooncakeMinutes = 20 // of each trace's arrivals
)

// The published run's load generator, inference-perf at its defaults (the
// published configuration sets none of these), as the report explains.
const (
	ipWorkers           = 112               // num_workers: the load generator's CPU count; 112 in llm-d's harness example report
	ipWorkerConcurrency = 100               // worker_max_concurrency
	ipTimeout           = 300 * time.Second // aiohttp's default total timeout: the client passed none
	ipStageGap          = 2 * time.Second   // the 1 s interval between stages + the 1 s lead of a stage's timer
)

// sharedClient is the load generator of the shared-prefix workloads.
func sharedClient(o options) fleetsim.Client {
	if o.client == "open" {
		return fleetsim.Client{}
	}
	return fleetsim.Client{Concurrency: o.concurrency, Timeout: o.timeout, DrainStages: true, StageGap: ipStageGap}
}

// defaultConcurrency is the published client's concurrency scaled as the
// stage rates are: the same in-flight requests per offered request/s.
func defaultConcurrency(qpsScale float64) int {
	return int(math.Round(qpsScale * ipWorkers * ipWorkerConcurrency))
}

var mooncakeCompressions = []float64{1, 2, 3}

// overloadSweep is the working sets, over the fleet's KV, that
// shared-prefix-overload runs at beyond overloadShare, to show where the
// policies come together.
var overloadSweep = []float64{2.5, 5, 10}

func scenarios(o options, h *blockhash.Hasher) ([]*scenario, error) {
	var out []*scenario
	base := fleetsim.DefaultConfig()
	base.Seed = o.seed

	outputs, err := parseOutputs(o.outputs)
	if err != nil {
		return nil, err
	}
	if o.runs(sharedPrefix) || o.runs(sharedPrefixOverload) {
		for _, output := range outputs {
			out = append(out, sharedScenarios(o, h, base, output)...)
		}
	}
	if o.runs(conversation) {
		mc, err := mooncakeScenarios(o, h, base)
		if err != nil {
			return nil, err
		}
		out = append(out, mc...)
	}
	if o.runs(prefillDecode) {
		pd, err := pdScenarios(o, h, base)
		if err != nil {
			return nil, err
		}
		out = append(out, pd...)
	}
	if o.runs(cacheOverload) {
		out = append(out, overloadScenarios(o, h, base)...)
	}
	if o.runs(heterogeneousSpeeds) {
		he, err := heteroScenarios(o, h, base)
		if err != nil {
			return nil, err
		}
		out = append(out, he...)
	}
	for _, sc := range out {
		if sc.bound != nil { // prefill-decode shares its workloads' bound
			continue
		}
		if b := sc.base; b != nil && sc.group == conversation { // its base's requests: its base's bound
			sc.bound = b.bound
			continue
		}
		sc.bound = fleetsim.BoundHits(sc.w, sc.cfg.Pods*sc.cfg.Blocks)
	}
	return out, nil
}

// mooncakeScenarios is conversation: each Mooncake trace replayed at each
// of mooncakeCompressions, and the fastest replay again under the seeds
// the acceptance pools.
func mooncakeScenarios(o options, h *blockhash.Hasher, base fleetsim.Config) ([]*scenario, error) {
	var out []*scenario
	for _, name := range []string{"conversation", "synthetic"} {
		minutes := float64(mooncakeMinutes)
		if o.quick {
			minutes = 2
		}
		w, err := readTrace(o, h, name, "mooncake "+name, minutes)
		if err != nil {
			return nil, err
		}
		mc := base
		mc.Pods = mooncakePods
		for _, c := range mooncakeCompressions {
			cw := w.Compress(c)
			cw.Name = fmt.Sprintf("%s %gx", w.Name, c)
			out = append(out, &scenario{group: conversation, cfg: mc, w: cw})
		}
		// The fastest replay overloads the fleet: its p90 is a queue that
		// moves with every tie broken otherwise, so kvrouter and the
		// oracle replay it under the next two seeds too, the very same
		// requests under another name.
		orig := out[len(out)-1]
		for _, seed := range o.repeats() {
			rc, rw := mc, *orig.w
			rc.Seed, rw.Name = seed, fmt.Sprintf("%s, seed %d", orig.w.Name, seed)
			out = append(out, &scenario{group: conversation, cfg: rc, w: &rw, only: []string{"llm-d-precise", "kvrouter", "oracle"}, base: orig})
		}
	}
	return out, nil
}

// sharedScenarios is shared-prefix, its repeats under the next two seeds
// for kvrouter and the oracle (the p90 sits on a cliff), and
// shared-prefix-overload, with its repeats for kvrouter and precise, with
// requests of output tokens each, on a fleet of the published pods.
func sharedScenarios(o options, h *blockhash.Hasher, base fleetsim.Config, output int) []*scenario {
	sp := fleetsim.PublishedSharedPrefix()
	sp.Groups, sp.Output, sp.QPSScale, sp.Seed = sharedGroups, output, o.qpsScale, o.seed
	if o.quick {
		sp.Groups, sp.Durations, sp.StageSeconds, sp.Warmup = 15, nil, 10, 10
	}
	tag := fmt.Sprintf(", %d output tokens", output)
	cfg := base
	publishedPod(&cfg)
	cfg.Client = sharedClient(o)
	cfg.Pods = sharedPods
	if o.quick { // pods as small as the workload, its working set still 73% of them
		cfg.Blocks = int(float64(sp.WorkingSet()) / capacityShare / float64(cfg.Pods*cfg.BlockSize))
	}
	out := []*scenario{{group: sharedPrefix, output: output, cfg: cfg, w: sp.Generate(sharedPrefix+" 73%"+tag, h), share: capacityShare, groups: sp.Groups, noise: true}}
	for _, seed := range o.repeats() {
		rs, rc := sp, cfg
		rs.Seed, rc.Seed = seed, seed
		w := rs.Generate(fmt.Sprintf("%s 73%%%s, seed %d", sharedPrefix, tag, seed), h)
		out = append(out, &scenario{group: sharedPrefix, output: output, cfg: rc, w: w, only: []string{"llm-d-precise", "kvrouter", "oracle"}, base: out[0], share: capacityShare, groups: sp.Groups, noise: true})
	}
	for i, share := range append([]float64{overloadShare}, overloadSweep...) {
		over := sp
		over.Groups = int(share*float64(cfg.Pods*cfg.Blocks*cfg.BlockSize)/float64(sp.System+sp.PerGroup*sp.Question) + 0.5)
		name := fmt.Sprintf("%s %g%%%s", sharedPrefixOverload, 100*share, tag)
		c := &scenario{group: sharedPrefixOverload, output: output, cfg: cfg, w: over.Generate(name, h), share: share, groups: over.Groups, sweep: i > 0, noise: true}
		out = append(out, c)
		// kvrouter and precise again under the next two seeds: the
		// acceptance compares them per stage pooled over three seeds.
		for _, seed := range o.repeats() {
			rs, rc := over, cfg
			rs.Seed, rc.Seed = seed, seed
			w := rs.Generate(fmt.Sprintf("%s, seed %d", name, seed), h)
			out = append(out, &scenario{group: sharedPrefixOverload, output: output, cfg: rc, w: w, only: []string{"llm-d-precise", "kvrouter"}, base: c, share: share, groups: over.Groups, noise: true})
		}
	}
	return out
}

// repeats are the seeds after o.seed that the runs the acceptance pools
// repeat under: o.seeds in all with o.seed.
func (o options) repeats() []uint64 {
	var out []uint64
	for k := 1; k < o.seeds; k++ {
		out = append(out, o.seed+uint64(k))
	}
	return out
}

// readTrace reads the first minutes of arrivals of the Mooncake trace
// file (conversation or synthetic) in o.traces as the workload name.
func readTrace(o options, h *blockhash.Hasher, file, name string, minutes float64) (*fleetsim.Workload, error) {
	f, err := os.Open(filepath.Join(o.traces, file+"_trace.jsonl"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	return fleetsim.ReadMooncake(name, f, h, minutes*60)
}

// parseOutputs reads -shared-output: output tokens per request, a comma
// separated list.
func parseOutputs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-shared-output %q: want positive token counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// publishedPod gives cfg the published run's pods, Qwen3-32B (32.8B
// parameters) on two H100s with tensor parallelism, from the constants of
// Llama-3.1-8B (8.03B) on one: prefill is compute-bound, at the same rate
// per GPU, 25,000 × 8.03/32.8 × 2 GPUs = 12,241 tokens/s; a step's fixed
// cost is its weight reads, 32.8 GB per GPU against 16.06 GB, 5.5 ms ×
// 2.04 = 11.2 ms; a token's KV (64 layers × 8 KV heads × 128 × 2 × 2
// bytes, 256 KiB) splits over the two GPUs, 128 KiB each, as the 8B
// model's on one; and the pod's KV cache is the published 307,328 tokens.
func publishedPod(cfg *fleetsim.Config) {
	cfg.PrefillTokensPerSecond = 25_000 * 8.03 / 32.8 * 2
	cfg.StepOverhead = 5500 * time.Microsecond * 3280 / 1606
	cfg.Blocks = publishedPodTokens / cfg.BlockSize
}

// publishedPodTokens is the KV cache of one published pod.
const publishedPodTokens = 307_328
