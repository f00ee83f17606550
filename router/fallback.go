package router

import (
	"cmp"
	"slices"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// fallbacks names the next best candidates after the pick (index pick), by
// cost, up to Config.DestinationEndpoints in all. The request keeps the pick's
// X-data-parallel-rank (or its absence) wherever it goes, so a candidate
// qualifies only where that header sends it to the candidate itself: the
// same rank on another server, or, for rank 0, a server of one rank (and
// no rank of a server of several for a pick that names none: that server's
// balancer would choose).
func (r *Router) fallbacks(d *Decision, pick int, sc *scratch) {
	order := make([]int, 0, len(sc.scores)-1)
	dest := sc.members[pick].Pod.Role != pod.RolePrefill // a prefill pod is no fallback for a destination
	for j := range sc.scores {
		if rank := sc.scores[j].DPRank; j != pick && (rank == d.DPRank || d.DPRank == 0 && rank < 0) &&
			(!dest || sc.members[j].Pod.Role != pod.RolePrefill) {
			order = append(order, j)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sc.scores[a].Cost, sc.scores[b].Cost) })
	if n := r.cfg.DestinationEndpoints - 1; len(order) > n {
		order = order[:n]
	}
	d.Fallbacks = make([]string, len(order))
	d.alts = make([]alternate, len(order))
	for k, j := range order {
		d.Fallbacks[k] = sc.members[j].Endpoint
		d.alts[k] = alternate{member: sc.members[j], matched: sc.scores[j].Matched, work: sc.scores[j].work}
	}
}
