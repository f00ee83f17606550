package fleetsim

import (
	"slices"
	"testing"
)

// TestPrefixScores checks llm-d's normalization of the precise prefix
// score: min-max over the pods that match, 1 for all of them on a tie, 0
// for a pod matching nothing, times the weight.
func TestPrefixScores(t *testing.T) {
	for _, tc := range []struct {
		blocks []int
		want   []float64
	}{
		{[]int{0, 4, 8, 6}, []float64{0, 0, 2, 1}},
		{[]int{0, 5, 0}, []float64{0, 2, 0}},
		{[]int{3, 3}, []float64{2, 2}},
		{[]int{0, 0}, []float64{0, 0}},
	} {
		got := make([]float64, len(tc.blocks))
		prefixScores(got, tc.blocks, 2)
		if !slices.Equal(got, tc.want) {
			t.Errorf("prefixScores(%v, weight 2) = %v, want %v", tc.blocks, got, tc.want)
		}
	}
}

// phasedPod is firstPod scraped phase of an interval late, recording the
// scrapes' times.
type phasedPod struct {
	firstPod
	phase float64
	at    []float64
}

func (p *phasedPod) scrapePhase() float64 { return p.phase }
func (p *phasedPod) Scraped([]Metrics)    { p.at = append(p.at, p.s.Now()) }

// TestShiftedScrapes checks that a phased policy's scrapes run its phase
// of an interval after everyone else's, every interval, and that
// PreciseShifted is llm-d-precise scraped half an interval late.
func TestShiftedScrapes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pods = 1
	w := manual(Request{Arrival: 0, Prompt: 64, Output: 200, Hashes: []uint64{1, 2, 3, 4}})
	for _, phase := range []float64{0, 0.5} {
		var p *phasedPod
		if _, err := Run(cfg, w, func(s *Sim) (Policy, error) {
			p = &phasedPod{firstPod: firstPod{s: s}, phase: phase}
			return p, nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(p.at) < 3 {
			t.Fatalf("phase %g: scrapes at %v, want at least 3", phase, p.at)
		}
		for i, at := range p.at {
			if want := (float64(i) + phase) * cfg.ScrapeInterval.Seconds(); !near(at, want) {
				t.Fatalf("phase %g: scrape %d at %v, want %v", phase, i, at, want)
			}
		}
	}
	for name, want := range map[string]float64{"llm-d-precise": -1, PreciseShifted: 0.5} {
		newPolicy, err := PolicyByName(name)
		if err != nil {
			t.Fatal(err)
		}
		var pol Policy
		if _, err := Run(cfg, w, func(s *Sim) (Policy, error) { pol, err = newPolicy(s); return pol, err }); err != nil {
			t.Fatal(err)
		}
		got := -1.0
		if ph, ok := pol.(phased); ok {
			got = ph.scrapePhase()
		}
		if got != want {
			t.Errorf("%s: scrape phase %v, want %v (-1: none)", name, got, want)
		}
	}
}
