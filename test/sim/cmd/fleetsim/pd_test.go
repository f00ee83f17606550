package main

import (
	"html"
	"math"
	"path/filepath"
	"strings"
	"testing"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// TestPDScenarios: prefill-decode runs each workload on the aggregated fleet and on
// the P/D fleet of the same pods at every threshold, kvrouter only, the
// P/D fleet's first -pd-prefill pods prefilling.
func TestPDScenarios(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := options{traces: "../../../../testdata/traces", quick: true, seed: 1, pdPrefill: 3}
	scs, err := pdScenarios(o, h, fleetsim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	per := 1 + len(pdThresholds)
	if len(scs) != 2*per {
		t.Fatalf("%d scenarios, want %d for each of 2 workloads", len(scs), per)
	}
	for i, sc := range scs {
		k := i % per
		if sc.group != prefillDecode || sc.cfg.Pods != pdPods || len(sc.only) != 1 || sc.only[0] != "kvrouter" || sc.w != scs[i-k].w || len(sc.bound) != len(sc.w.Requests) {
			t.Fatalf("scenario %d: group %q, %d pods, policies %v, workload %q; want d, %d, kvrouter, its first fleet's, with a bound",
				i, sc.group, sc.cfg.Pods, sc.only, sc.w.Name, pdPods)
		}
		if k == 0 {
			if sc.cfg.Roles != nil || sc.topology != "aggregated" {
				t.Errorf("%s: aggregated fleet %q has roles %v", sc.w.Name, sc.topology, sc.cfg.Roles)
			}
			continue
		}
		prefill := 0
		for p, r := range sc.cfg.Roles {
			if want := map[bool]kvpod.Role{true: kvpod.RolePrefill, false: kvpod.RoleDecode}[p < 3]; r != want {
				t.Errorf("%s %s: pod %d is %q, want %q", sc.w.Name, sc.topology, p, r, want)
			}
			if r == kvpod.RolePrefill {
				prefill++
			}
		}
		if th := pdThresholds[k-1]; sc.cfg.PDThreshold != th || sc.topology != pdName(th) || prefill != 3 || len(sc.cfg.Roles) != pdPods {
			t.Errorf("%s %s: threshold %d, %d prefill pods of %d roles; want %d, 3 of %d", sc.w.Name, sc.topology, sc.cfg.PDThreshold, prefill, len(sc.cfg.Roles), th, pdPods)
		}
		if err := sc.cfg.Validate(); err != nil {
			t.Errorf("%s %s: %v", sc.w.Name, sc.topology, err)
		}
	}
}

// pdJobs is prefill-decode of one workload of two requests: the aggregated fleet,
// then P/D at threshold 512 where one request hopped.
func pdJobs() []*job {
	w := &fleetsim.Workload{Name: prefillDecode + ", test", Levels: []fleetsim.Level{{Name: "x"}}, Requests: make([]fleetsim.Request, 2)}
	var jobs []*job
	for i, topology := range []string{"aggregated", pdName(512)} {
		cfg := fleetsim.DefaultConfig()
		if i > 0 {
			cfg.Roles = pdRoles(4)
		}
		res := &fleetsim.Result{Outcomes: []fleetsim.Outcome{
			{Arrival: 1, First: 1.5 + float64(i), Finish: 3.5 + float64(i), Output: 101},
			{Arrival: 2, First: 2.1, Finish: 3.1, Output: 1, Hop: i > 0, Transfer: 0.04},
		}}
		st := fleetsim.Stats{Level: "all", Requests: 2, P50: 0.1, P90: 0.5 + float64(i), P99: 0.5 + float64(i), Mean: 0.3, ITL: 0.02, OutputTPS: 40, HitRatio: 0.25}
		if i > 0 {
			st.Hops, st.Transfer = 1, 0.04
		}
		jobs = append(jobs, &job{sc: &scenario{group: prefillDecode, cfg: cfg, w: w, only: []string{"kvrouter"}, topology: topology}, policy: "kvrouter", res: res, stats: []fleetsim.Stats{st, st}})
	}
	return jobs
}

// TestWritePD: prefill-decode's table has a row per fleet, in order, with its hops,
// TTFT, ITL and transfer, and its plots are written as the report links
// them, with a line per fleet.
func TestWritePD(t *testing.T) {
	jobs := pdJobs()
	var b strings.Builder
	writePD(&b, jobs)
	got := b.String()
	rows := []string{
		"4 prefill and 4 decode pods",
		"### prefill-decode, test",
		"| aggregated | 0 of 2 | 0.100 s | 0.500 s | 0.500 s | 0.300 s | 20.0 ms | 40 | 25.0% | 0.0 ms | 0 |",
		"| P/D, threshold 512 | 1 of 2 | 0.100 s | 1.500 s | 1.500 s | 0.300 s | 20.0 ms | 40 | 25.0% | 40.0 ms | 0 |",
		"(prefill-decode-shared-ttft.svg)", "(prefill-decode-shared-itl.svg)",
	}
	at := 0
	for _, r := range rows {
		i := strings.Index(got[at:], r)
		if i < 0 {
			t.Fatalf("prefill-decode section lacks, in order, %q:\n%s", r, got)
		}
		at += i
	}
	dir := t.TempDir()
	if err := writePDPlots(dir, jobs); err != nil {
		t.Fatal(err)
	}
	for _, m := range pdMetrics {
		_, svg := readPlot(t, filepath.Join(dir, pdPlotFile(jobs[0].sc.w, m.suffix)))
		for _, want := range []string{prefillDecode + ", test: " + m.what + " by percentile", "percentile of requests", "aggregated", pdName(512)} {
			if !strings.Contains(svg, ">"+html.EscapeString(want)+"<") {
				t.Errorf("%s plot lacks %q", m.suffix, want)
			}
		}
	}
	var none strings.Builder
	writePD(&none, nil)
	if none.Len() != 0 {
		t.Errorf("writePD without prefill-decode jobs wrote %q, want nothing", none.String())
	}
}

// TestFleetStyles: prefill-decode's fleets each have their own color and marker.
func TestFleetStyles(t *testing.T) {
	colors, glyphs := map[any]string{}, map[any]string{}
	names := []string{"aggregated"}
	for _, th := range pdThresholds {
		names = append(names, pdName(th))
	}
	for _, n := range names {
		st, ok := fleetStyles[n]
		if !ok {
			t.Errorf("fleet %q has no style", n)
			continue
		}
		if q, dup := colors[st.color]; dup {
			t.Errorf("%s and %s share color %v", n, q, st.color)
		}
		if q, dup := glyphs[st.glyph]; dup {
			t.Errorf("%s and %s share marker %T", n, q, st.glyph)
		}
		colors[st.color], glyphs[st.glyph] = n, n
	}
}

func TestPercentile(t *testing.T) {
	vs := []float64{1, 2, 3, 4}
	for _, tt := range []struct{ p, want float64 }{{10, 1}, {50, 2}, {75, 3}, {99, 4}} {
		if got := percentile(vs, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", vs, tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("percentile(nil, 50) = %v, want NaN", got)
	}
}
