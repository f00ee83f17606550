package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/test/fleetsim"
)

// The scaling of the published runs to what 2 cores simulate in minutes.
const (
	sharedPods      = 4    // the llm-d run had 8
	sharedGroups    = 75   // of 150: the working set halves with the fleet
	sharedOutput    = 1000 // as published
	sharedQPSScale  = 0.58 // simulated QPS per published QPS: the fleets' decode capacity ratio, see the report
	capacityShare   = 0.73 // working set / fleet KV capacity
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

func scenarios(o options, h *kvindex.Hasher) ([]*scenario, error) {
	var out []*scenario
	base := fleetsim.DefaultConfig()
	base.Seed = o.seed

	sp := fleetsim.PublishedSharedPrefix()
	sp.Groups, sp.Output, sp.QPSScale, sp.Seed = sharedGroups, o.output, o.qpsScale, o.seed
	if o.quick {
		sp.Groups, sp.Durations, sp.StageSeconds, sp.Warmup = 15, nil, 10, 10
	}
	cfg := base
	cfg.Client = sharedClient(o)
	cfg.Pods = sharedPods
	cfg.Blocks = int(float64(sp.WorkingSet()) / capacityShare / float64(cfg.Pods*cfg.BlockSize))
	out = append(out, &scenario{group: "b", cfg: cfg, w: sp.Generate("(b) shared prefix 73%", h)})
	for _, seed := range []uint64{o.seed + 1, o.seed + 2} { // the p90 sits on a cliff: repeat kvrouter and the oracle
		rs, rc := sp, cfg
		rs.Seed, rc.Seed = seed, seed
		w := rs.Generate(fmt.Sprintf("(b) shared prefix 73%%, seed %d", seed), h)
		out = append(out, &scenario{group: "b", cfg: rc, w: w, only: []string{"kvrouter", "oracle"}})
	}
	over := sp
	over.Groups = int(overloadShare*float64(cfg.Pods*cfg.Blocks*cfg.BlockSize)/float64(sp.System+sp.PerGroup*sp.Question) + 0.5)
	out = append(out, &scenario{group: "c", cfg: cfg, w: over.Generate("(c) shared prefix 125%", h)})

	for _, name := range []string{"conversation", "synthetic"} {
		minutes := float64(mooncakeMinutes)
		if o.quick {
			minutes = 2
		}
		f, err := os.Open(filepath.Join(o.traces, name+"_trace.jsonl"))
		if err != nil {
			return nil, err
		}
		w, err := fleetsim.ReadMooncake("(a) mooncake "+name, f, h, minutes*60)
		_ = f.Close() // read-only: nothing to lose
		if err != nil {
			return nil, err
		}
		mc := base
		mc.Pods = mooncakePods
		for _, c := range mooncakeCompressions {
			cw := w.Compress(c)
			cw.Name = fmt.Sprintf("%s %gx", w.Name, c)
			out = append(out, &scenario{group: "a", cfg: mc, w: cw})
		}
	}
	for _, sc := range out {
		sc.bound = fleetsim.BoundHits(sc.w, sc.cfg.Pods*sc.cfg.Blocks)
	}
	return out, nil
}
