package router

import (
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// Homes shared by replicas. Each replica keeps its own table, learned from
// its own decisions, and an index shared by the replicas (package
// redisindex) carries the homes between them: at each of its lease ticks
// it writes the prefixes this replica homed or routed home since the last
// (HomesChanged), then reads back every replica's and hands them to
// AdoptHomes, so that the replicas' tables agree on where each prefix
// lives within a tick, the last writer winning a prefix two replicas
// placed at once. While the tables are shared, homes do not step aside for
// the requests other routers send to the pods: those are the other
// replicas', routed to the same homes.

// HomesChanged appends to dst the prefixes this replica homed or routed
// home since the last call, with their home, footprint and when they lapse
// unless routed again, and returns it. With homes off it returns dst.
func (r *Router) HomesChanged(dst []kvindex.Home) []kvindex.Home {
	t := r.homes
	if t == nil {
		return dst
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.changed {
		h.changed = false
		if h.elem == nil || h.pod == kvindex.InvalidPod {
			continue // left the table, or lost its home, meanwhile
		}
		dst = append(dst, kvindex.Home{Namespace: h.key.ns, Block: h.key.block, Pod: h.pod, Tokens: h.tokens, Until: h.seen + int64(r.cfg.HomeIdle)})
	}
	clear(t.changed)
	t.changed = t.changed[:0]
	return dst
}

// AdoptHomes takes the homes the replicas share, read after this
// replica's changes were written: each prefix is homed on its pod (which
// must be in this replica's fleet), entering the table if new here, its
// footprint the larger of this replica's count and the most shared; a
// prefix this replica
// homed or routed since its changes were taken keeps its own home, which
// its next write shares. Homes past their Until are ignored. Until until,
// homes no longer step aside for the requests other routers send to the
// pods; an index that stops sharing (Redis down) lets that lapse.
func (r *Router) AdoptHomes(homes []kvindex.Home, until time.Time) {
	t := r.homes
	if t == nil {
		return
	}
	now := r.now().UnixNano()
	members := r.fleet.Snapshot().Members()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sharedUntil = until.UnixNano()
	t.expire(now - int64(r.cfg.HomeIdle))
	for _, s := range homes {
		if s.Pod == kvindex.InvalidPod || s.Until <= now || !hasMember(members, s.Pod) {
			continue
		}
		k := homeKey{s.Namespace, s.Block}
		h := t.keys[k]
		if h == nil {
			h = t.add(k, now, r.cfg.HomeTable)
		}
		h.remote = max(h.remote, s.Tokens)
		grow := t.footprint(h)
		if h.requests < 2 { // another replica saw it recur
			h.requests = 2
			t.active += h.tokens
		} else {
			t.active += grow
		}
		if !h.changed {
			t.setPod(h, s.Pod)
		}
	}
}

// hasMember says whether pod is among members.
func hasMember(members []*fleet.Member, pod kvindex.PodID) bool {
	for _, m := range members {
		if m.ID == pod {
			return true
		}
	}
	return false
}
