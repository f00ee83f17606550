package router

import (
	"math"
	"slices"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// Homes. A pod's KV cache is an LRU: a block nothing uses stays about the
// cache's free room over the rate new blocks arrive (misses and decoded
// tokens). When the groups of prompts routed to a pod need more than its
// cache, each group's blocks are evicted before its next request and every
// request there misses part of its prompt, while another pod may have
// room. The per-request cost prices one request: it sees a hit behind a
// queue on the first pod and a cold prefill on the other, and keeps every
// group where it thrashes.
//
// So each prefix gets a home pod, and no pod homes prefixes beyond
// Tuning.HomeFill of its KV cache (fleet.Load.KVCapacity; nothing is homed
// on a pod whose capacity is unknown). A prefix is keyed by its first
// block, per model; its footprint is the distinct prompt tokens seen under
// it (the shared blocks once, then each new tail; home.grow).
//
// A request goes home unless the home costs more than another pod by
// Tuning.HomeMargin times that pod's prefill: a pod with room for the prefix
// priced as scored, one without as a cold prefill of the whole prompt (a
// copy there ages out, but first evicts that pod's homes). The copy a
// request routed away leaves is not followed.
//
// A prefix is homed on its second request (a prompt seen once may never
// return, and takes no room): on the pod that caches half of it, if it
// fits there, else routed by cost; or, cached nowhere, on the cheapest pod
// where it fits. A prefix whose home's prefixes have outgrown the bound
// moves, on its next request, to the cheapest pod where it fits. Both go
// to the new home unless its queue alone passes the bound above: its one
// cold prefill there ends the thrash of every group on the old home.
//
// Homes step aside (the request is routed by cost) for a prefix that fits
// on no pod; for one that carries more than a pod's share of the requests
// (a system prompt every conversation starts with: one pod cannot carry
// it); while the prefixes seen twice need more than the pods' homes may
// fill, an overload of the caches no placement mends, which the router's
// queue (queue.go) and the per-request cost manage; and while the pods run
// more requests (vllm:num_requests_running and _waiting) than 1.5 times
// this replica's in flight there (and, while homes are shared, the other
// sharing replicas'), plus othersSlack. Then other replicas,
// or clients, route there too: each replica's homes, learned from its own
// decisions, would place a prefix on a pod of its own, and every pod would
// hold more groups than its cache (in the fleet simulator, two replicas'
// tables disagreed on 17 of 75 groups, and the fast pods thrashed again).
// Replicas whose index shares their homes (homeshare.go) count one
// another's requests as their own: they route to the same homes.
//
// A prefix unseen for Tuning.HomeIdle leaves the table, and its footprint
// its home's, unless its home still holds its first block (per the index's
// view of the pod's events; homeTable.caches) and the home's prefixes are
// within its bound with it: then it stays another HomeIdle, and is looked
// at again. It is idle meanwhile: its footprint counts in neither its home's
// nor the active total until a request comes (an idle prefix neither
// fills its home against those that recur nor makes the caches seem
// overloaded; counted, it moved the fleet simulator's llm-d 125% run's
// stage 15 by 12%).
// Light traffic leaves a group unseen for longer than that while its blocks
// stay cached; homed anew, it could land on another pod than the one that
// answered its prompts (the fleet simulator's llm-d 73% run, light stages:
// 40 of 3,366 requests went home and missed a question another pod held).
// Requests fade from its share of the traffic over HomeIdle. The table
// holds at most Tuning.HomeTable prefixes.

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
