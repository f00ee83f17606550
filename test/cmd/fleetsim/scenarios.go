package main

import (
	"fmt"
	"os"
	"path/filepath"

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

var mooncakeCompressions = []float64{1, 2, 3}

func scenarios(o options, h *kvindex.Hasher) ([]*scenario, error) {
	var out []*scenario
	base := fleetsim.DefaultConfig()
	base.Seed = o.seed

	sp := fleetsim.PublishedSharedPrefix()
	sp.Groups, sp.Output, sp.QPSScale, sp.Seed = sharedGroups, o.output, o.qpsScale, o.seed
	if o.quick {
		sp.Groups, sp.StageSeconds, sp.Warmup = 15, 10, 10
	}
	cfg := base
	cfg.Pods = sharedPods
	cfg.Blocks = int(float64(sp.WorkingSet()) / capacityShare / float64(cfg.Pods*cfg.BlockSize))
	out = append(out, &scenario{group: "b", cfg: cfg, w: sp.Generate("(b) shared prefix 73%", h)})
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
