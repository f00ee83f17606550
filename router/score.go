package router

import (
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Score is one candidate's predicted time to first token and its parts.
type Score struct {
	Pod     string  `json:"name"`
	Address string  `json:"address"`
	Matched int     `json:"matched_blocks"`
	Tiers   Tiers   `json:"matched_blocks_by_tier"`
	Spec    int     `json:"speculative_blocks"`
	Queue   float64 `json:"queue_seconds"`
	Prefill float64 `json:"prefill_seconds"`
	Cost    float64 `json:"cost_seconds"` // Queue + Prefill × (1 + requests queued on the pod)
}

// Tiers is a match per cache tier.
type Tiers struct {
	GPU   int `json:"gpu"`
	CPU   int `json:"cpu"`
	Disk  int `json:"disk"`
	Other int `json:"other"`
}

// score predicts each candidate's time to first token, the queue ahead of
// the request plus the prefill of the prompt tokens the pod does not cache,
// and adds the delay that prefill imposes on the requests that will queue
// behind it: as many, by Little's law, as are queued there now. Under
// light load that is nothing and the fastest pod wins; under heavy load a
// miss costs the pod its whole queue again, so requests stay with the pod
// caching their prefix instead of spreading misses that thrash every
// cache and cut the fleet's throughput.
func (r *Router) score(ms []kvindex.PodMatch, members []*member, tokens int, out []Score) []Score {
	out = out[:0]
	bs := float64(r.hasher.BlockSize())
	for i, m := range ms {
		mem := members[i]
		saved := float64(m.Speculative) * bs // a speculative block is on the GPU soon
		for t, n := range m.Tiers {
			saved += float64(n) * bs * r.cfg.TierWeights[t]
		}
		uncached := max(float64(tokens)-saved, 0)
		l := mem.load
		queue := float64(l.PrefillTokens.Load())*r.cfg.PrefillSecondsPerToken +
			float64(l.Waiting.Load())*r.cfg.WaitingSecondsPerRequest +
			float64(l.Running.Load())*r.cfg.RunningSecondsPerRequest
		prefill := uncached * r.cfg.PrefillSecondsPerToken
		behind := float64(max(l.Prefilling.Load(), l.Waiting.Load()))
		out = append(out, Score{
			Pod: mem.Name, Address: mem.Address, Matched: m.Blocks, Spec: m.Speculative,
			Tiers:   Tiers{GPU: m.Tiers[kvindex.TierGPU], CPU: m.Tiers[kvindex.TierCPU], Disk: m.Tiers[kvindex.TierDisk], Other: m.Tiers[kvindex.TierOther]},
			Queue:   queue,
			Prefill: prefill,
			Cost:    queue + prefill*(1+behind),
		})
	}
	return out
}

// pick returns the index of the cheapest score, at random among those
// within the tolerance of the best.
func (r *Router) pick(scores []Score) int {
	best := 0
	for i, s := range scores {
		if s.Cost < scores[best].Cost {
			best = i
		}
	}
	limit := scores[best].Cost*(1+r.cfg.Tolerance) + r.cfg.ToleranceSeconds
	intN := r.cfg.IntN
	if intN == nil {
		intN = rand.IntN
	}
	n, chosen := 0, best
	for i, s := range scores {
		if s.Cost <= limit {
			n++
			if intN(n) == 0 { // reservoir sampling: uniform among the near-best
				chosen = i
			}
		}
	}
	return chosen
}
