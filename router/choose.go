package router

import "math/rand/v2"

// pick returns the index of the cheapest score among those ok allows (nil:
// all; at least one must be), or of one chosen uniformly among those
// within the tolerance of it.
func (r *Router) pick(scores []Score, ok func(int) bool) int {
	i, _ := r.choose(scores, ok, 0, 0)
	return i
}

// choose is pick for a request of tokens prompt tokens when share is the
// candidates' mean share of a prompt found cached lately: a request that
// places a new prefix (placement) goes to the least used KV cache within
// the widened tolerance, ties at random, and placed says so.
func (r *Router) choose(scores []Score, ok func(int) bool, tokens int, share float64) (i int, placed bool) {
	best := cheapest(scores, ok)
	tol := r.placement(scores[best], tokens, share, len(scores))
	placed = tol > 0
	if !placed {
		tol = r.cfg.Tolerance
	}
	limit := scores[best].Cost*(1+tol) + r.cfg.Tuning.ToleranceSeconds
	intN := r.intN()
	n, chosen := 0, -1
	for i, s := range scores {
		if s.Cost > limit || ok != nil && !ok(i) {
			continue
		}
		if placed && chosen >= 0 && s.KVUsage > scores[chosen].KVUsage {
			continue
		}
		if placed && (chosen < 0 || s.KVUsage < scores[chosen].KVUsage) {
			n, chosen = 1, i
			continue
		}
		if n++; intN(n) == 0 { // reservoir sampling: uniform among the near-best (the least used caches)
			chosen = i
		}
	}
	return chosen, placed
}

// placement is the widened tolerance (Tuning.PlacementTolerance × share)
// a request of tokens prompt tokens whose cheapest of n candidates scores
// best places a new prefix within; 0 when that pod caches half of the
// prompt or more, or placement is off.
func (r *Router) placement(best Score, tokens int, share float64, n int) float64 {
	tol := r.cfg.Tuning.PlacementTolerance * share
	if tol <= 0 || n < 2 || best.uncached*2 <= tokens {
		return 0
	}
	return tol
}

// cheapest is the index of the cheapest score among those ok allows (nil:
// all; at least one must be).
func cheapest(scores []Score, ok func(int) bool) int {
	best := -1
	for i, s := range scores {
		if (ok == nil || ok(i)) && (best < 0 || s.Cost < scores[best].Cost) {
			best = i
		}
	}
	return best
}

func (r *Router) intN() func(int) int {
	if r.cfg.IntN != nil {
		return r.cfg.IntN
	}
	return rand.IntN
}
