package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// published is one scheduler's result in the llm-d 73-capacity report,
// all stages pooled, and the first stage whose TTFT p90 passed 5 s.
type published struct {
	policy, scheduler string
	p90, mean, tps    float64
	collapse          string
}

// publishedShared is the published shared-prefix run, next to the simulated policy
// that plays each scheduler.
var publishedShared = []published{
	{"llm-d-precise", "precise", 0.542, 0.298, 8730, "none"},
	{"kvrouter", "precise, the peer to beat", 0.542, 0.298, 8730, "none"},
	{"approximate", "estimated", 31.083, 13.316, 6944, "40"},
	{"least-loaded", "load", 94.865, 46.987, 4266, "15"},
	{"random", "random", 92.551, 45.281, 4429, "20"},
}

// writePublished sets each simulated shared-prefix next to the published run:
// pooled TTFT, output tokens/s as a multiple of random's (the fleets
// differ in size), and the first collapsed stage.
func writePublished(b *strings.Builder, jobs []*job) {
	var last *scenario
	for _, j := range jobs {
		if j.sc.group == sharedPrefix && j.sc.only == nil && j.sc != last {
			last = j.sc
			writePublishedScenario(b, jobs, j.sc)
		}
	}
}

func writePublishedScenario(b *strings.Builder, jobs []*job, sc *scenario) {
	by := map[string]*job{}
	for _, j := range jobs {
		if j.sc == sc {
			by[j.policy] = j
		}
	}
	rnd := by["random"]
	if rnd == nil {
		return
	}
	fmt.Fprintf(b, "\n### %s next to the published run\n\n", sc.w.Name)
	b.WriteString("| policy (published scheduler) | TTFT p90 published / sim | mean published / sim | output tok/s ÷ random's, published / sim | first stage with p90 > 5 s, published / sim |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	rndAll := rnd.all()
	for _, p := range publishedShared {
		j := by[p.policy]
		if j == nil {
			continue
		}
		all := j.all()
		fmt.Fprintf(b, "| %s (%s) | %s / %s | %s / %s | %.2f / %.2f | %s / %s |\n",
			p.policy, p.scheduler, secs(p.p90), secs(all.P90), secs(p.mean), secs(all.Mean),
			p.tps/publishedShared[len(publishedShared)-1].tps, all.OutputTPS/rndAll.OutputTPS, p.collapse, firstCollapse(j))
	}
}

// firstCollapse is the first numbered stage of j whose TTFT p90 passed
// 5 s, or "none".
func firstCollapse(j *job) string {
	for _, st := range stages(j) {
		if collapsed(st) {
			return st.Level
		}
	}
	return "none"
}

// stages is j's numbered stages (no warm-up, no pooled row).
func stages(j *job) []fleetsim.Stats {
	var out []fleetsim.Stats
	for _, st := range j.stats {
		if _, err := strconv.ParseFloat(st.Level, 64); err == nil {
			out = append(out, st)
		}
	}
	return out
}
