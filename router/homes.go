package router

import (
	"math"
	"slices"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// Homes give each prefix a home pod its requests go to, and keep each
// pod's homes within its KV cache; docs/routing.md#homes states the rule
// and why. Here: routeHome applies it to one request (standAside, homeFor,
// worthIt); the table (hometable.go) keys a prefix by its first block per
// model, measures its footprint (the distinct prompt tokens seen under it:
// home.grow), keeps each pod's homed total and the active total, expires
// and idles prefixes (expireHomes), and is shared between replicas through
// an index that shares it (homeshare.go). Its tuned numbers are in
// Tuning and tuning.go.

// homeResult is what homes did for a request.
type homeResult uint8

const (
	homeAtHome  homeResult = iota // routed to its home
	homePlaced                    // a new prefix, homed and routed there
	homeMoved                     // its home's homes outgrew the cache: homed elsewhere, routed there
	homeAway                      // its home cost too much: routed by cost
	homeNowhere                   // it fits on no pod: routed by cost
	homeFirst                     // its first request: routed by cost
	homeShared                    // it carries more than a pod's share of the requests: routed by cost
	homeFull                      // the prefixes that recur need more than the caches: routed by cost
	homeOthers                    // the pods run more requests than this replica sent: routed by cost
	numHomeResults
)

var homeResultNames = [numHomeResults]string{"home", "placed", "moved", "away", "nowhere", "first", "shared", "full", "others"}

// homeRequest is one request routeHome decides: its prompt's prefix, its
// candidates and their costs, and what choose needs for a request homes
// step aside for.
type homeRequest struct {
	ns      string
	hashes  []uint64
	bs      int
	scores  []Score
	members []*fleet.Member
	ok      func(int) bool // the candidates allowed (nil: all)
	tokens  int
	share   float64
	now     int64 // unix nanoseconds
}

// routeHome is choose with homes: the pod of the request's candidates
// that homes the prompt's prefix, unless homes step aside for it or the
// home costs too much, when the request is routed by cost (choose). In
// order: the prefix enters the table; homes step aside for a prefix seen
// once, one carrying more than a pod's share, pods other routers send to,
// and caches overrun (standAside); the prefix's home is found, or placed
// or moved where it fits (homeFor); the home is taken unless another pod
// is clearly cheaper (worthIt).
func (r *Router) routeHome(q homeRequest) (int, bool) {
	t := r.homes
	t.mu.Lock()
	defer t.unlock()
	r.expireHomes(q.now)
	h := t.enter(homeKey{q.ns, q.hashes[0]}, q.hashes, q.bs, q.now, r.cfg)
	result := r.standAside(h, q)
	at := -1
	if result == homeAtHome {
		at, result = r.homeFor(h, q)
	}
	if at >= 0 && !r.worthIt(h, q, at, result) {
		if result != homeAtHome {
			t.setPod(h, kvindex.InvalidPod) // a new home is worth its one cold prefill, not a queue
		}
		at, result = -1, homeAway
	}
	t.met[result].Inc()
	if at < 0 {
		return r.choose(q.scores, q.ok, q.tokens, q.share)
	}
	if !h.changed && q.now < t.sharedUntil { // kept for HomesChanged while an index shares them
		h.changed = true
		t.changed = append(t.changed, h)
	}
	return at, false
}

// standAside reports why homes step aside for h's request (homeFirst,
// homeShared, homeOthers, homeFull), or homeAtHome when they do not.
// Called with the table's lock.
func (r *Router) standAside(h *home, q homeRequest) homeResult {
	t := r.homes
	switch {
	case h.requests < 2:
		// A prompt seen once may never come back: it takes no pod's room.
		return homeFirst
	case h.rate*float64(len(q.members)) > t.rate:
		// More than a pod's share of the traffic: one pod cannot carry
		// it, and its prompts go where each is cheapest.
		t.setPod(h, kvindex.InvalidPod)
		h.hot = true
		return homeShared
	}
	h.hot = false
	var room, own, seen int64
	for _, m := range q.members {
		room += r.fill(m.Load)
		own += m.Load.InFlight.Load()
		seen += m.Load.Running.Load() + m.Load.Waiting.Load()
	}
	if q.now < t.sharedUntil {
		own += t.peers[q.ns] // the replicas sharing these homes route to them too
	}
	switch {
	case seen > own+own/2+othersSlack:
		// The pods run more requests than this replica has in flight:
		// other replicas (or clients) route there too, and homes each
		// replica keeps by its own decisions disagree.
		return homeOthers
	case t.active > room:
		// The prefixes that recur need more than the caches: no placement
		// keeps them, and the router's queue and the per-request cost
		// manage that overload better than homes moving prefixes about.
		return homeFull
	}
	return homeAtHome
}

// homeFor is the candidate that homes h, and how: at its home
// (homeAtHome), or homed now (homePlaced, homeMoved); -1 when the home is
// not a candidate of this request (homeAway) or the prefix fits on no pod
// (homeNowhere). Called with the table's lock.
func (r *Router) homeFor(h *home, q homeRequest) (int, homeResult) {
	t := r.homes
	at := slices.IndexFunc(q.members, func(m *fleet.Member) bool { return m.ID == h.pod })
	switch {
	case h.pod != kvindex.InvalidPod && (at >= 0 && q.ok != nil && !q.ok(at) || at < 0 && r.member(h.pod) != nil):
		// Not a candidate of this request (its subset, or a queued request
		// released to another pod): routed by cost, the home kept.
		return -1, homeAway
	case at >= 0 && t.homed[h.pod] <= t.moveAt(r.fill(q.members[at].Load), q.now):
		return at, homeAtHome
	}
	// No home yet, the home left the fleet, or its homes outgrew its
	// cache: the cheapest pod where the prefix fits. A prefix without a
	// home that the cheapest pod caches half of lives there: homed there if
	// it fits, else routed by cost (a copy elsewhere would be a second one).
	result, only := homePlaced, -1
	if h.pod != kvindex.InvalidPod {
		result = homeMoved
		t.setPod(h, kvindex.InvalidPod)
	} else if b := cheapest(q.scores, q.ok); q.scores[b].uncached*2 <= q.tokens {
		only = b
	}
	at = -1
	for i, m := range q.members {
		if (q.ok == nil || q.ok(i)) && (only < 0 || i == only) && t.homed[m.ID]+h.tokens <= r.fill(m.Load) && (at < 0 || q.scores[i].Cost < q.scores[at].Cost) {
			at = i
		}
	}
	if at < 0 {
		return -1, homeNowhere
	}
	t.setPod(h, q.members[at].ID)
	return at, result
}

// worthIt reports whether candidate at, h's home (result: how it became
// so), is worth its cost. Another pod costs as scored where the prefix
// fits, and a cold prefill where it does not (a copy there evicts that
// pod's homes, which the per-request cost cannot see). The home may cost
// more by Tuning.HomeMargin times that pod's prefill, not its queue: a
// fleet whose queues are long moves sooner. A new home is worth its one
// cold prefill, not a queue: its queue alone is held to that limit.
// Called with the table's lock.
func (r *Router) worthIt(h *home, q homeRequest, at int, result homeResult) bool {
	t := r.homes
	limit := math.Inf(1)
	for i, s := range q.scores {
		if i == at || q.ok != nil && !q.ok(i) {
			continue
		}
		c := s.cold
		if t.homed[q.members[i].ID]+h.tokens <= r.fill(q.members[i].Load) {
			c = s.Cost
		}
		limit = min(limit, c+r.cfg.Tuning.HomeMargin*(c-s.Queue))
	}
	limit += r.cfg.Tuning.ToleranceSeconds
	if result == homeAtHome {
		return q.scores[at].Cost <= limit
	}
	return q.scores[at].Queue <= limit
}

// fill is the prompt tokens the homes of the pod whose load is l may
// hold: Tuning.HomeFill of its KV cache; nothing while its capacity is
// unknown.
func (r *Router) fill(l *fleet.Load) int64 {
	return int64(r.cfg.Tuning.HomeFill * float64(l.KVCapacity.Load()))
}

// member is pod's member of the fleet; nil once it left.
func (r *Router) member(pod kvindex.PodID) *fleet.Member {
	for _, m := range r.fleet.Snapshot().Members() {
		if m.ID == pod {
			return m
		}
	}
	return nil
}

// HomeReport is a prefix's entry among the homes, as POST /v1/score shows
// it.
type HomeReport struct {
	// Pod is the prefix's home; "" when it has none (seen once, fitting on
	// no pod, or carrying more than a pod's share of the requests).
	Pod string `json:"pod"`
	// Tokens is the prefix's footprint: the distinct prompt tokens seen
	// under it.
	Tokens int64 `json:"footprint_tokens"`
	// Requests are the requests seen under it since it entered the table.
	Requests int `json:"requests"`
	// PodTokens and PodFill are the footprints its home homes and what
	// they may fill (Tuning.HomeFill of the pod's KV cache).
	PodTokens int64 `json:"pod_homed_tokens"`
	PodFill   int64 `json:"pod_fill_tokens"`
}

// homeReport is the entry of the prefix whose first block is block in
// namespace ns, the home named among members; nil when the table lacks it.
func (r *Router) homeReport(ns string, block uint64, members []*fleet.Member) *HomeReport {
	t := r.homes
	t.mu.Lock()
	defer t.unlock()
	h := t.keys[homeKey{ns, block}]
	if h == nil {
		return nil
	}
	rep := &HomeReport{Tokens: h.tokens, Requests: h.requests}
	for _, m := range members {
		if m.ID == h.pod {
			rep.Pod, rep.PodTokens, rep.PodFill = m.Pod.Name, t.homed[h.pod], r.fill(m.Load)
		}
	}
	return rep
}

// Homed is the footprints of the prefixes homed on pod, whose load is l,
// and what they may fill (Tuning.HomeFill of its KV cache): 0 and 0 with
// homes off.
func (r *Router) Homed(pod kvindex.PodID, l *fleet.Load) (homed, fill int64) {
	t := r.homes
	if t == nil {
		return 0, 0
	}
	t.mu.Lock()
	defer t.unlock()
	return t.homed[pod], r.fill(l)
}
