package router

import (
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
)

// Homes shared by replicas. Each replica keeps its own table, learned from
// its own decisions, and an index shared by the replicas (package
// redisindex) carries the homes between them: at each of its syncs (every
// redisindex.Config.HomeSync, and each lease tick) it writes the prefixes this
// replica homed or routed home since the last (HomesChanged), then reads
// back the other replicas' and hands them to AdoptHomes, so that the
// replicas' tables agree on where each prefix lives within a sync, the
// last writer winning a prefix two replicas placed at once. At each lease
// tick it also shares the requests each replica has in flight
// (HomesInFlight); while the tables are shared, homes count the other
// sharing replicas' with their own before they step aside for the
// requests other routers send to the pods (a replica not sharing, a
// client), since those replicas route to the same homes.
//
// Footprints are shared as the prompts that grew them (replica.HomeTail:
// a prompt's signature, the hashes grow reads). Each replica replays the
// others' into its own marks, so it counts every distinct prompt any
// replica saw once, as one replica seeing them all would. A replica sees a
// share of each prefix's prompts: its own count alone would place more
// prefixes on a pod than its cache holds. The largest footprint a replica
// shared with a home stays a floor, for prompts whose tails were missed
// (sent before the sharing began, or dropped past maxHomeTails).

// HomesChanged appends to dst the prefixes this replica homed or routed
// home since the last call, with their home, footprint and when they lapse
// unless routed again, and to tails the prompts that grew a footprint
// meanwhile, and returns both. With homes off it returns them as they are.
func (r *Router) HomesChanged(dst []replica.Home, tails []replica.HomeTail) ([]replica.Home, []replica.HomeTail) {
	t := r.homes
	if t == nil {
		return dst, tails
	}
	t.mu.Lock()
	defer t.unlock()
	for _, h := range t.changed {
		h.changed = false
		if h.elem == nil || h.pod == kvindex.InvalidPod {
			continue // left the table, or lost its home, meanwhile
		}
		dst = append(dst, replica.Home{Namespace: h.key.ns, Block: h.key.block, Pod: h.pod, Tokens: h.tokens, Until: h.seen + int64(r.cfg.Tuning.HomeIdle)})
	}
	clear(t.changed)
	t.changed = t.changed[:0]
	tails = append(tails, t.tails...)
	clear(t.tails)
	t.tails = t.tails[:0]
	return dst, tails
}

// maxHomeTails bounds the tails kept between two HomesChanged: past it
// they are dropped, and the other replicas count those prompts only
// through this replica's footprints (the floor).
const maxHomeTails = 1 << 14

// shareTail keeps, while the homes are shared, the prompt of n blocks of
// bs tokens whose signature is t.sig as a tail that grew h; not for a hot
// prefix, which has no home (every conversation of a chat service may
// start with one system prompt's block).
func (t *homeTable) shareTail(h *home, n, bs int, now int64) {
	if now >= t.sharedUntil || h.hot || len(t.tails) >= maxHomeTails {
		return
	}
	t.tails = append(t.tails, replica.HomeTail{Namespace: h.key.ns, Block: h.key.block, Blocks: n, BlockSize: bs, Signature: slices.Clone(t.sig)})
}

// adoptTail replays another replica's tail into the table at now, as a
// request of its prefix.
func (t *homeTable) adoptTail(s replica.HomeTail, now int64, cfg Config) {
	if s.Blocks < 1 || s.BlockSize < 1 || len(s.Signature) != (s.Blocks-1)/homeStride+1 {
		return
	}
	k := homeKey{s.Namespace, s.Block}
	h := t.keys[k]
	if h == nil {
		h = t.add(k, now, cfg.Tuning.HomeTable)
	}
	t.setActive(h)
	// The prompt was a request another replica saw: a prefix seen once
	// by each is homed on its next request, as one router would.
	t.tally(h, s.Blocks, s.Signature, s.BlockSize)
}

// AdoptHomes takes the homes the replicas share, read after this
// replica's changes were written. The other replicas' tails grow the
// footprints first. Then each prefix is homed on its pod (which must be
// in this replica's fleet), entering the table if new here, its footprint
// the larger of this replica's count and the most shared; a prefix this
// replica homed or routed since its changes were taken keeps its own
// home, which its next write shares. Homes past their Until are ignored. Until until,
// homes count peers (by namespace: the requests the other sharing replicas
// have in flight) as their own before they step aside for the requests
// other routers send to the pods; an index that stops sharing (Redis down)
// lets that lapse.
func (r *Router) AdoptHomes(homes []replica.Home, tails []replica.HomeTail, peers map[string]int64, until time.Time) {
	t := r.homes
	if t == nil {
		return
	}
	now := r.now().UnixNano()
	inFleet := map[kvindex.PodID]bool{}
	for _, m := range r.fleet.Snapshot().Members() {
		inFleet[m.ID] = true
	}
	t.mu.Lock()
	t.sharedUntil, t.peers = until.UnixNano(), peers
	r.expireHomes(now)
	t.unlock()
	// In batches, the lock released between them: a sync may bring
	// thousands, and decisions wait on the lock.
	for from := 0; from < len(tails); from += adoptBatch {
		t.mu.Lock()
		for _, s := range tails[from:min(from+adoptBatch, len(tails))] {
			t.adoptTail(s, now, r.cfg)
		}
		t.unlock()
	}
	for from := 0; from < len(homes); from += adoptBatch {
		t.mu.Lock()
		t.adoptHomes(homes[from:min(from+adoptBatch, len(homes))], inFleet, now, r.cfg)
		t.unlock()
	}
}

// adoptBatch is how many tails, or homes, AdoptHomes takes at a time.
const adoptBatch = 64

// adoptHomes homes each prefix of homes on its pod, if in inFleet (above).
func (t *homeTable) adoptHomes(homes []replica.Home, inFleet map[kvindex.PodID]bool, now int64, cfg Config) {
	for _, s := range homes {
		if s.Pod == kvindex.InvalidPod || s.Until <= now || !inFleet[s.Pod] {
			continue
		}
		k := homeKey{s.Namespace, s.Block}
		h := t.keys[k]
		if h == nil {
			h = t.add(k, now, cfg.Tuning.HomeTable)
		}
		t.setActive(h)
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

// HomesInFlight is the requests this replica has in flight to the pods of
// namespace, as an index that shares the homes shares them.
func (r *Router) HomesInFlight(namespace string) int64 {
	var n int64
	if t := r.fleet.Snapshot().Target(namespace); t != nil {
		for _, m := range t.Members {
			n += m.Load.InFlight.Load()
		}
	}
	return n
}
