package router

import (
	"errors"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// prefillHop is the prefill pod of a disaggregated decision: it computes
// the prompt and hands its KV cache to the destination, which decodes. It
// holds the prompt's prefill work and speculative entries until the
// destination's first byte says the prompt was computed.
type prefillHop struct {
	member *fleet.Member
	work   int64
	prompt int64 // the prompt's tokens
	spec   *hashBuf
}

// disaggregated reports whether members mix prefill pods with pods that
// can be a destination (decode pods, or pods of both roles): then a
// request's destination is one of the latter, and a prefill pod computes
// its prompt when the destination lacks enough of it (Config.PDThresholdTokens).
// A model served by prefill pods alone is routed among them as a whole.
func disaggregated(members []*fleet.Member) bool {
	prefill, dest := false, false
	for _, m := range members {
		if m.Pod.Role == pod.RolePrefill {
			prefill = true
		} else {
			dest = true
		}
	}
	return prefill && dest
}

// isDestination and isPrefill are the picks' filters of a disaggregated
// request.
func isDestination(sc *scratch) func(int) bool {
	return func(i int) bool { return sc.members[i].Pod.Role != pod.RolePrefill }
}

func isPrefill(sc *scratch) func(int) bool {
	return func(i int) bool { return sc.members[i].Pod.Role == pod.RolePrefill }
}

// addPrefillHop gives d, whose destination is candidate i, a prefill pod
// when the destination lacks at least Config.PDThresholdTokens of the prompt's
// tokens: the prefill candidate of the lowest cost for the uncached prompt
// (its own cache counted). The prefill pod then takes the prefill work and
// the speculative entries too (it computes the blocks; the destination
// receives them); the destination's own prefill charge is dropped.
func (r *Router) addPrefillHop(d *Decision, i int, sc *scratch) {
	if sc.scores[i].uncached < r.cfg.PDThresholdTokens || sc.scores[i].uncached == 0 {
		return
	}
	j := r.pick(sc.scores, isPrefill(sc))
	m := sc.members[j]
	hop := &prefillHop{member: m, work: sc.scores[j].work, prompt: int64(d.Tokens)}
	m.Load.InFlight.Add(1)
	r.charge(m.Load, m.ID, hop.work, hop.prompt, 1)
	if len(sc.hashes) > 0 {
		switch err := r.speculate(m.Load, m.ID, sc.hashes, sc.scores[j].Matched > sc.scores[j].Spec); {
		case err == nil:
			b := r.hashBuf()
			b.h = append(b.h, sc.hashes...)
			hop.spec = b
		case !errors.Is(err, kvindex.ErrUnknownPod):
			r.logger.Warn("speculative entries not recorded", "pod", m.Pod.Name, "error", err)
		}
	}
	d.hop, d.PrefillPod, d.PrefillAddress = hop, m.Pod.Name, m.Endpoint
	d.prefill = 0
}

// prefilled ends the hop's part: its load and speculative entries.
func (h *prefillHop) prefilled(r *Router) {
	l := h.member.Load
	l.InFlight.Add(-1)
	r.charge(l, h.member.ID, -h.work, -h.prompt, -1)
	if b := h.spec; b != nil {
		h.spec = nil
		r.settle(h.member.Load, h.member.ID, b)
	}
}

// PrefillHeader returns the header naming d's prefill pod (Config.
// PrefillHeader, ip:port), and false when d has none.
func (d *Decision) PrefillHeader() (name, value string, ok bool) {
	if d.hop == nil {
		return "", "", false
	}
	return d.router.cfg.PrefillHeader, d.PrefillAddress, true
}
