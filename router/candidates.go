package router

import (
	"time"

	"github.com/kvrouter/kvrouter/router/fleet"
)

// resolve fills sc.members with the candidates of a request for model in
// snap: only the model's pods when named, else any pod. It returns the
// model's target (nil when not named), or why no pod can serve it.
func (r *Router) resolve(snap *fleet.Snapshot, model string, named bool, subset *Subset, now time.Time, sc *scratch) (*fleet.Target, error) {
	var t *fleet.Target
	if named {
		if t = snap.Target(model); t == nil {
			e := notFound("model %q is served by no pod", model)
			if r.fleet.Known(model) {
				e = unavailable("no ready pod serves model %q: its pods are gone", model)
			}
			e.noPod = model != ""
			return nil, e
		}
	}
	r.candidates(snap, t, subset, now, sc)
	if len(sc.members) == 0 {
		if model == "" {
			return t, unavailable("no ready pod to route to")
		}
		e := unavailable("no ready pod serves model %q", model)
		e.noPod = subset == nil // a subset hint that excludes every pod is not a lack of capacity
		return t, e
	}
	return t, nil
}

// candidates fills sc.members with the ready pods of t (every ready pod when
// t is nil) allowed by the subset hint, less the blind ones while any other
// remains (dropBlind).
func (r *Router) candidates(snap *fleet.Snapshot, t *fleet.Target, subset *Subset, now time.Time, sc *scratch) {
	consider := func(m *fleet.Member) {
		if m.Pod.Ready && subset.Allows(m.Endpoint) {
			sc.members = append(sc.members, m)
		}
	}
	if t != nil {
		for _, m := range t.Members {
			consider(m)
		}
	} else {
		for _, m := range snap.Members() {
			consider(m)
		}
	}
	if r.fleet.Scraped() {
		sc.members = r.dropBlind(sc.members, now)
	}
}

// dropBlind removes the blind members (fleet.Metrics.Blind) when at least
// one is not blind, and returns members unchanged otherwise.
//
// A blind pod is not scored with the figures it has: they read zero, or
// the queue of a while ago, so it would look idle and draw traffic to a pod
// kvrouter cannot see, likely one overloaded or half dead. Nor is it
// penalized by a made-up queue: there is no figure to price, and any price
// either still draws traffic or never does. So it is left out while a pod
// with fresh figures can serve the request. When every candidate is blind
// (the metrics port is down fleet-wide, or a network policy blocks it) they
// are scored as they are: requests still route, and kvrouter's own
// in-flight and prefill counts still spread them.
func (r *Router) dropBlind(members []*fleet.Member, now time.Time) []*fleet.Member {
	kept := members[:0] // writes only over members already read
	for _, m := range members {
		if !m.Load.Metrics(now, r.cfg.StaleMetricsAfter).Blind() {
			kept = append(kept, m)
		}
	}
	if len(kept) == 0 { // nothing was written: members is intact
		return members
	}
	return kept
}
