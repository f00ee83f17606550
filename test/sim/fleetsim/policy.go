package fleetsim

import (
	"fmt"
	"math"
)

// Policies lists the policies PolicyByName knows, in report order.
var Policies = []string{"random", "round-robin", "least-loaded", "approximate", "llm-d-precise", "kvrouter", "oracle"}

// PolicyByName returns the constructor of a policy in Policies, or of
// kvrouter-learned: kvrouter pricing each pod at the prefill speed it
// learns from the pods' scraped counters (fleet.SpeedEstimator), the
// configured speed its prior, where kvrouter prices every pod at the
// configured speed (the operator's measurement of a speed-1 pod); or of
// kvrouter-mean, pricing every pod at the fleet's mean speed; or of
// kvrouter-exact, told each pod's speed (only fleets of several speeds,
// Config.Speeds, run those three); or of PreciseShifted.
func PolicyByName(name string) (NewPolicy, error) {
	switch name {
	case "random":
		return func(s *Sim) (Policy, error) { return &random{s: s}, nil }, nil
	case "round-robin":
		return func(s *Sim) (Policy, error) { return &roundRobin{n: s.Pods()}, nil }, nil
	case "least-loaded":
		return func(s *Sim) (Policy, error) { return &leastLoaded{s: s}, nil }, nil
	case "approximate":
		return func(s *Sim) (Policy, error) {
			cfg := s.Config().Approximate
			if cfg == (Approximate{}) {
				cfg = DefaultApproximate()
			}
			return newApproximate(s, cfg), nil
		}, nil
	case "llm-d-precise", PreciseShifted:
		return func(s *Sim) (Policy, error) {
			cfg := s.Config().Precise
			if cfg == (Precise{}) {
				cfg = DefaultPrecise()
			}
			p, err := newPrecise(s, cfg)
			if name == PreciseShifted && err == nil {
				return shifted{p}, nil
			}
			return p, err
		}, nil
	case "kvrouter":
		return func(s *Sim) (Policy, error) { return newKVRouter(s) }, nil
	case "kvrouter-learned":
		return func(s *Sim) (Policy, error) { return newLearnedKVRouter(s) }, nil
	case "kvrouter-exact":
		return func(s *Sim) (Policy, error) { return newExactKVRouter(s) }, nil
	case "kvrouter-mean":
		return func(s *Sim) (Policy, error) { return newMeanKVRouter(s) }, nil
	case "oracle":
		return func(s *Sim) (Policy, error) { return newOracle(s), nil }, nil
	}
	return nil, fmt.Errorf("fleetsim: unknown policy %q (known: %v)", name, Policies)
}

// quiet is the part of Policy most policies ignore.
type quiet struct{}

func (quiet) Started(*Request)  {}
func (quiet) Finished(*Request) {}

// random picks a pod uniformly.
type random struct {
	quiet
	s *Sim
}

func (p *random) Pick(*Request) int { return p.s.Rand().IntN(p.s.Pods()) }

// roundRobin cycles through the pods.
type roundRobin struct {
	quiet
	n, next int
}

func (p *roundRobin) Pick(*Request) int {
	i := p.next
	p.next = (p.next + 1) % p.n
	return i
}

// argmax returns the index of the highest score, uniformly at random
// among equal ones.
func argmax(s *Sim, scores []float64) int {
	best, n := 0, 0
	for i, v := range scores {
		switch {
		case v > scores[best]+1e-12:
			best, n = i, 1
		case math.Abs(v-scores[best]) <= 1e-12:
			n++
			if s.Rand().IntN(n) == 0 {
				best = i
			}
		}
	}
	return best
}

// cheapest returns the index of the lowest cost, uniformly at random among
// those within the fraction tie of it.
func cheapest(s *Sim, costs []float64, tie float64) int {
	best := 0
	for i, c := range costs {
		if c < costs[best] {
			best = i
		}
	}
	limit := costs[best] * (1 + tie)
	chosen, n := best, 0
	for i, c := range costs {
		if c <= limit {
			n++
			if s.Rand().IntN(n) == 0 {
				chosen = i
			}
		}
	}
	return chosen
}

// loadScores adds the Gateway API Inference Extension's queue scorer
// (waiting requests, min-max normalized, fewer is better) and KV-cache
// utilization scorer (1 − usage), with their weights, to scores.
func loadScores(scores []float64, m []Metrics, queueWeight, kvWeight float64) {
	lo, hi := math.MaxInt, 0
	for _, x := range m {
		lo, hi = min(lo, x.Waiting), max(hi, x.Waiting)
	}
	for i, x := range m {
		q := 1.0
		if hi > lo {
			q = float64(hi-x.Waiting) / float64(hi-lo)
		}
		scores[i] += queueWeight*q + kvWeight*(1-x.KVUsage)
	}
}

// leastLoaded is llm-d's "load only" scheduler: queue and KV use from the
// last metrics scrape, equally weighted.
type leastLoaded struct {
	quiet
	s      *Sim
	scores []float64
}

func (p *leastLoaded) Pick(*Request) int {
	p.scores = append(p.scores[:0], make([]float64, p.s.Pods())...)
	loadScores(p.scores, p.s.Metrics(), 1, 1)
	return argmax(p.s, p.scores)
}
