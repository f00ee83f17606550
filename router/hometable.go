package router

import (
	"container/list"
	"math"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/prometheus/client_golang/prometheus"
)

// homeKey names a prefix: its model's index namespace and first block.
type homeKey struct {
	ns    string
	block uint64
}

// home is one prefix's entry.
type home struct {
	key homeKey
	pod kvindex.PodID // kvindex.InvalidPod: none (it fits on no pod)
	// tokens is its footprint: the larger of own, the distinct prompt
	// tokens this replica saw under it, and remote, the most another
	// replica shared (homeshare.go). Each counts a subset of its prompts,
	// so neither counts a prompt twice.
	tokens, own, remote int64
	// marks are the hashes of its prompts' blocks at every homeStride-th
	// position and of each prompt's last block: what measures a new
	// prompt's distinct tail (grow).
	marks map[uint64]struct{}
	seen  int64 // unix nanoseconds of its last request
	// keptAt is when the table last found it unseen for Tuning.HomeIdle
	// and kept it, its home still holding its first block (unix
	// nanoseconds); idle: kept so and not seen since, its footprint out of
	// its home's and out of the active total (setIdle).
	keptAt int64
	idle   bool
	// rate is its requests, each fading with age over Tuning.HomeIdle;
	// requests counts them all.
	rate     float64
	requests int
	elem     *list.Element // nil once removed
	// changed: homed or routed home since the table's changes were last
	// shared (HomesChanged); hot: its last request carried more than a
	// pod's share of the traffic, so its tails are not shared.
	changed, hot bool
}

// homeTable is the router's homes.
type homeTable struct {
	mu    sync.Mutex
	keys  map[homeKey]*home
	lru   list.List // of *home, the most recently seen (or held) first
	homed map[kvindex.PodID]int64
	// active is the footprints of the prefixes seen twice or more.
	active int64
	// marks counts the prefixes' marks, at most markBudget
	// (homeMarkBudget) but for the latest prefix's.
	marks, markBudget int
	// rate is every prefix's requests, faded as home.rate, at rateAt.
	rate   float64
	rateAt int64
	// met counts decisions by homeResult, and homes the prefixes with one.
	met   [numHomeResults]prometheus.Counter
	homes prometheus.Gauge
	// shared is 1 while the homes are shared (sharedUntil).
	shared prometheus.GaugeFunc
	// changed are the prefixes homed or routed home since HomesChanged
	// last took them, while the homes are shared; sharedUntil (unix
	// nanoseconds) is when the table shared by AdoptHomes lapses without
	// another.
	changed     []*home
	sharedUntil int64
	// tails are the prompts that grew a footprint since HomesChanged last
	// took them, while the homes are shared; sig is enter's scratch.
	tails []replica.HomeTail
	sig   []uint64
	// peers is, by namespace, the requests the replicas sharing the homes
	// have in flight, as of the last AdoptHomes.
	peers map[string]int64
	// caches says whether a pod holds a block, per the index's view of its
	// events, without a round trip (nil: an index that cannot say, and
	// idle prefixes leave).
	caches func(kvindex.PodID, uint64) bool
}

// newHomeTable is a table whose metrics go to reg; now is the router's
// clock, for the sharing's gauge.
func newHomeTable(reg prometheus.Registerer, now func() time.Time) (*homeTable, error) {
	t := &homeTable{keys: map[homeKey]*home{}, homed: map[kvindex.PodID]int64{}, markBudget: homeMarkBudget}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "home_decisions_total",
		Help: "Decisions by what the prefix's home did (routing.homes): home (routed to it), placed (a new prefix homed there), moved (its home's prefixes outgrew its KV cache: homed elsewhere), away (the home cost too much, or is not a candidate of the request), nowhere (it fits on no pod), first (its first request), shared (it carries more than a pod's share of the requests), full (the recurring prefixes need more than the caches), others (the pods run more requests than this replica sent them); all but the first three routed by cost.",
	}, []string{"result"})
	for i, n := range homeResultNames {
		t.met[i] = vec.WithLabelValues(n)
	}
	t.homes = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "homed_prefixes",
		Help: "Prefixes the router keeps a home pod for (routing.homes).",
	})
	t.shared = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "homes_shared",
		Help: "1 while the index shares the homes with the other replicas, and homes count their requests as this replica's; 0 otherwise.",
	}, func() float64 {
		t.mu.Lock()
		defer t.unlock()
		if now().UnixNano() < t.sharedUntil {
			return 1
		}
		return 0
	})
	if err := register(reg, vec, t.homes, t.shared); err != nil {
		return nil, err
	}
	return t, nil
}

// enter finds the prefix of the prompt whose blocks hash to hashes (bs
// tokens each) in the table, or adds it, as seen at now; its footprint
// grows by the prompt's tokens not seen under it before.
func (t *homeTable) enter(k homeKey, hashes []uint64, bs int, now int64, cfg Config) *home {
	h := t.keys[k]
	if h == nil {
		h = t.add(k, now, cfg.Tuning.HomeTable)
	} else {
		t.setActive(h)
		t.lru.MoveToFront(h.elem)
	}
	tau := float64(cfg.Tuning.HomeIdle)
	h.rate = h.rate*math.Exp(-float64(now-h.seen)/tau) + 1
	t.rate = t.rate*math.Exp(-float64(now-t.rateAt)/tau) + 1
	t.rateAt = now
	h.seen = now
	t.sig = signature(t.sig[:0], hashes)
	if t.tally(h, len(hashes), t.sig, bs) {
		t.shareTail(h, len(hashes), bs, now)
	}
	return h
}

// tally counts under h a request of the prompt of n blocks of bs tokens
// whose signature is sig: the footprint grows by the prompt's tokens not
// seen under it before, the marks stay within their budget, and the
// active total follows the prefixes seen twice or more. It reports
// whether the prompt grew the footprint.
func (t *homeTable) tally(h *home, n int, sig []uint64, bs int) bool {
	h.requests++
	before := len(h.marks)
	grew := h.grow(n, sig)
	h.own += int64(grew * bs)
	t.marks += len(h.marks) - before
	for t.marks > t.markBudget && t.lru.Back().Value.(*home) != h {
		t.remove(t.lru.Back().Value.(*home))
	}
	switch grow := t.footprint(h); {
	case h.requests == 2:
		t.active += h.tokens
	case h.requests > 2:
		t.active += grow
	}
	return grew > 0
}

// footprint sets h's footprint to the larger of its own count and the
// shared one, moving its home's total with it, and returns the growth
// (the active total is the caller's).
func (t *homeTable) footprint(h *home) int64 {
	grow := max(h.own, h.remote) - h.tokens
	h.tokens += grow
	if h.pod != kvindex.InvalidPod {
		t.homed[h.pod] += grow
	}
	return grow
}

// moveAt is how far the homes of a pod that may hold fill may grow before
// a prefix moves off it: fill itself, and sharedMoveSlack more while the
// homes are shared (now is unix nanoseconds). Two replicas that place
// prefixes within one sync each fill a pod to its bound; the pod's homes
// pass it until the syncs meet, and moving a prefix for that, a cold
// prefill, cost the fleet simulator's cold start more than the overshoot
// (8b46f9d).
func (t *homeTable) moveAt(fill, now int64) int64 {
	if now < t.sharedUntil {
		return fill + int64(sharedMoveSlack*float64(fill))
	}
	return fill
}

// homeStride is how many blocks apart a prefix's marks are.
const homeStride = 16

// homeMarks bounds a prefix's marks: a prefix with this many has a
// footprint beyond any pod's cache (homeStride × homeMarks blocks) and
// grows by its prompts' whole length thereafter.
const homeMarks = 8192

// homeMarkBudget bounds the marks of the whole table (about 25 bytes
// each): past it the least recently seen prefixes leave.
const homeMarkBudget = 1 << 21

// signature appends to dst the hashes of a prompt's blocks that marks
// are kept at: every homeStride-th block's before its last (blocks
// homeStride-1, 2×homeStride-1, …), and its last block's. It is all grow
// reads of the prompt, and what replicas share of it (homeshare.go).
func signature(dst, hashes []uint64) []uint64 {
	n := len(hashes)
	for i := homeStride - 1; i < n-1; i += homeStride {
		dst = append(dst, hashes[i])
	}
	return append(dst, hashes[n-1])
}

// grow records a prompt of n blocks, whose signature is sig, under h and
// returns the blocks it adds to h's footprint: those past its longest
// prefix seen before, to within homeStride blocks (a block's hash chains
// every block before it, so a prompt's prefix was seen when its last
// block's hash was).
func (h *home) grow(n int, sig []uint64) int {
	if h.marks == nil {
		h.marks = map[uint64]struct{}{}
	}
	last, strides := sig[len(sig)-1], sig[:len(sig)-1]
	if _, ok := h.marks[last]; ok {
		return 0
	}
	seen := 0                                // the prefix seen: 0, or one past a mark
	for k := len(strides) - 1; k >= 0; k-- { // the marks before the last block, latest first
		if _, ok := h.marks[strides[k]]; ok {
			seen = (k + 1) * homeStride
			break
		}
	}
	if len(h.marks) < homeMarks {
		for _, m := range strides[seen/homeStride:] {
			h.marks[m] = struct{}{}
		}
		h.marks[last] = struct{}{}
	}
	return n - seen
}

// add enters a new prefix, homeless, dropping the least recently seen when
// the table holds limit.
func (t *homeTable) add(k homeKey, now int64, limit int) *home {
	if t.lru.Len() >= limit {
		t.remove(t.lru.Back().Value.(*home))
	}
	h := &home{key: k, pod: kvindex.InvalidPod, seen: now}
	h.elem = t.lru.PushFront(h)
	t.keys[k] = h
	return h
}

// expireHomes drops the prefixes unseen for Tuning.HomeIdle at now (unix
// nanoseconds), but for those whose home still holds their first block
// and homes no more than it may fill: they are held another HomeIdle. The
// caller holds the table's lock.
func (r *Router) expireHomes(now int64) {
	t := r.homes
	cutoff := now - int64(r.cfg.Tuning.HomeIdle)
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		h := e.Value.(*home)
		if max(h.seen, h.keptAt) >= cutoff {
			return
		}
		if t.caches != nil && h.pod != kvindex.InvalidPod && t.caches(h.pod, h.key.block) {
			homed := t.homed[h.pod]
			if h.idle {
				homed += h.tokens // as it would be, woken
			}
			if m := r.member(h.pod); m != nil && homed <= r.fill(m.Load) {
				h.keptAt = now
				t.setIdle(h)
				t.lru.MoveToFront(e)
				continue
			}
		}
		t.remove(h)
	}
}

// setIdle takes h, unseen but kept, out of its home's footprints and out of
// the active total: it recurs no more for now, and neither fills its home
// against the prefixes that do nor makes the caches seem overloaded. Its
// home stays its own.
func (t *homeTable) setIdle(h *home) {
	if h.idle {
		return
	}
	h.idle = true
	if t.homed[h.pod] -= h.tokens; t.homed[h.pod] <= 0 {
		delete(t.homed, h.pod)
	}
	t.active -= h.tokens // homed, so seen twice
}

// setActive counts h, idle, again: a request, or another replica's, came.
func (t *homeTable) setActive(h *home) {
	if !h.idle {
		return
	}
	h.idle = false
	if h.pod != kvindex.InvalidPod {
		t.homed[h.pod] += h.tokens
	}
	t.active += h.tokens
}

// remove drops h from the table and its footprint from its home's.
func (t *homeTable) remove(h *home) {
	t.setActive(h) // counted again, to be taken off below
	t.setPod(h, kvindex.InvalidPod)
	t.marks -= len(h.marks)
	if h.requests >= 2 {
		t.active -= h.tokens
	}
	t.lru.Remove(h.elem)
	h.elem = nil
	delete(t.keys, h.key)
}

// setPod moves h's footprint to pod (kvindex.InvalidPod: no home).
func (t *homeTable) setPod(h *home, pod kvindex.PodID) {
	if h.pod == pod {
		return
	}
	if h.pod != kvindex.InvalidPod {
		if t.homed[h.pod] -= h.tokens; t.homed[h.pod] <= 0 {
			delete(t.homed, h.pod)
		}
		t.homes.Dec()
	}
	h.pod = pod
	if pod != kvindex.InvalidPod {
		t.homed[pod] += h.tokens
		t.homes.Inc()
	}
}
