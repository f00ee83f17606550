package kvindex

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PodID is a pod's handle in an Index, from AddPod: a small index, reused
// once the pod is removed, and a generation, so that a stale handle fails
// with ErrUnknownPod instead of touching another pod's entries.
type PodID uint64

// InvalidPod is what AddPod returns when the index already holds its
// maximum of 16,777,216 pods; every operation on it fails.
const InvalidPod = ^PodID(0)

func (id PodID) index() uint32 { return uint32(id) }
func (id PodID) gen() uint32   { return uint32(id >> 32) }
func makePodID(index, gen uint32) PodID {
	return PodID(gen)<<32 | PodID(index)
}

// ErrUnknownPod is returned for a PodID that was never added or was removed.
var ErrUnknownPod = errors.New("kvindex: unknown pod")

// Index maps vLLM block hashes to the pods, and cache tiers, that hold them.
// Its methods are safe for concurrent use.
type Index struct {
	cfg     Config
	now     func() time.Time
	epoch   time.Time
	mask    uint64 // len(shards) - 1
	limit   int    // entries per shard
	shards  []*shard
	metrics *metrics
	scratch sync.Pool // *matchScratch

	pods struct {
		sync.RWMutex
		byName map[string]PodID
		info   []podInfo // by pod index
		free   []uint32  // indexes of removed pods whose entries are gone, oldest first
		// layouts interns the pods' layouts, so that pods of one model
		// share theirs and a match looks each spec's blocks up once.
		layouts map[string]*layout
	}
}

type podInfo struct {
	name      string
	namespace string
	gen       uint32
	live      bool
	layout    *layout // nil: priced by full attention alone
}

// New returns an empty index. reg receives its metrics; nil registers none.
func New(cfg Config, reg prometheus.Registerer) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x := &Index{cfg: cfg, now: cfg.Now}
	if x.now == nil {
		x.now = time.Now
	}
	x.epoch = x.now()
	x.mask = uint64(cfg.Shards - 1)
	x.limit = (cfg.MaxEntries + cfg.Shards - 1) / cfg.Shards
	x.shards = make([]*shard, cfg.Shards)
	for i := range x.shards {
		x.shards[i] = newShard(x.limit)
	}
	x.pods.byName = make(map[string]PodID)
	m, err := newMetrics(x, reg)
	if err != nil {
		return nil, err
	}
	x.metrics = m
	return x, nil
}

// AddPod registers a pod serving the base model namespace and returns its
// handle. vLLM's hashes do not include the model, so a pod's entries only
// ever match requests for its own namespace. Adding a known name with the
// same namespace returns the existing handle; with another namespace the old
// pod's entries are cleared and a new handle is returned.
func (x *Index) AddPod(name, namespace string) PodID {
	x.pods.Lock()
	old, ok := x.pods.byName[name]
	if ok && x.pods.info[old.index()].namespace == namespace {
		x.pods.Unlock()
		return old
	}
	if ok {
		x.retirePodLocked(old)
	}
	id := x.newPodLocked(name, namespace)
	x.pods.Unlock()
	if ok {
		x.releasePod(old)
	}
	return id
}

func (x *Index) newPodLocked(name, namespace string) PodID {
	var i uint32
	switch {
	case len(x.pods.free) > 0:
		i = x.pods.free[0]
		x.pods.free = x.pods.free[1:]
	case len(x.pods.info) < maxPods:
		i = uint32(len(x.pods.info))
		x.pods.info = append(x.pods.info, podInfo{})
	default:
		return InvalidPod
	}
	p := &x.pods.info[i]
	*p = podInfo{name: name, namespace: namespace, gen: p.gen + 1, live: true}
	id := makePodID(i, p.gen)
	x.pods.byName[name] = id
	return id
}

// retirePodLocked makes id unknown; releasePod then clears its entries and
// frees its index for reuse.
func (x *Index) retirePodLocked(id PodID) {
	x.pods.info[id.index()].live = false
	delete(x.pods.byName, x.pods.info[id.index()].name)
}

func (x *Index) releasePod(id PodID) {
	x.clear(id, allTiers)
	x.pods.Lock()
	x.pods.free = append(x.pods.free, id.index())
	x.pods.Unlock()
}

// RemovePod clears a pod's entries and retires its handle.
func (x *Index) RemovePod(id PodID) error {
	x.pods.Lock()
	if err := x.checkPodLocked(id); err != nil {
		x.pods.Unlock()
		return err
	}
	x.retirePodLocked(id)
	x.pods.Unlock()
	x.releasePod(id)
	return nil
}

// Pod returns the handle of a registered pod name.
func (x *Index) Pod(name string) (PodID, bool) {
	x.pods.RLock()
	defer x.pods.RUnlock()
	id, ok := x.pods.byName[name]
	return id, ok
}

// PodName returns the name id was added with, or "" for an unknown handle.
func (x *Index) PodName(id PodID) string {
	x.pods.RLock()
	defer x.pods.RUnlock()
	if x.checkPodLocked(id) != nil {
		return ""
	}
	return x.pods.info[id.index()].name
}

func (x *Index) checkPodLocked(id PodID) error {
	i := id.index()
	if int(i) >= len(x.pods.info) || !x.pods.info[i].live || x.pods.info[i].gen != id.gen() {
		return fmt.Errorf("%w: %d/%d", ErrUnknownPod, id.index(), id.gen())
	}
	return nil
}

func (x *Index) checkPod(id PodID) error {
	x.pods.RLock()
	defer x.pods.RUnlock()
	return x.checkPodLocked(id)
}

// ErrBadTier is returned for a Tier outside [0, NumTiers).
var ErrBadTier = errors.New("kvindex: no such tier")

func (x *Index) checkOp(id PodID, tier Tier) error {
	if int(tier) >= NumTiers {
		return fmt.Errorf("%w: %d", ErrBadTier, tier)
	}
	return x.checkPod(id)
}

func (x *Index) shardIndex(h uint64) uint64 { return (h ^ h>>29) & x.mask }

func (x *Index) shardOf(h uint64) *shard { return x.shards[x.shardIndex(h)] }

// eachLocked calls f for every hash with its shard locked, each shard's
// hashes in their order, prefetching the home slots of the hashes ahead
// (prefetch.go). A batch of at least two hashes per shard on average locks
// each shard once (a decision's speculation of a long prompt); a shorter
// one locks per hash. Shards are independent, so the order across them does
// not matter.
func (x *Index) eachLocked(hashes []uint64, f func(s *shard, h uint64)) {
	if len(hashes) < 2*len(x.shards) {
		for _, h := range hashes {
			x.shardOf(h).prefetchHome(h)
		}
		for _, h := range hashes {
			s := x.shardOf(h)
			s.mu.Lock()
			f(s, h)
			s.mu.Unlock()
		}
		return
	}
	b := shardBatches.Get().(*shardBatch)
	defer func() {
		if cap(b.order) <= maxKeptBatch {
			shardBatches.Put(b)
		}
	}()
	// Sort the hashes by shard, keeping each shard's in order.
	start := slices.Grow(b.start[:0], len(x.shards)+1)[:len(x.shards)+1]
	order := slices.Grow(b.order[:0], len(hashes))[:len(hashes)]
	b.start, b.order = start, order
	clear(start)
	for _, h := range hashes {
		start[x.shardIndex(h)+1]++
	}
	for k := 1; k < len(start); k++ {
		start[k] += start[k-1]
	}
	for i, h := range hashes {
		k := x.shardIndex(h)
		order[start[k]] = int32(i)
		start[k]++
	}
	for _, i := range order[:min(prefetchAhead, len(order))] {
		x.shardOf(hashes[i]).prefetchHome(hashes[i])
	}
	var locked *shard
	for j, i := range order {
		if j+prefetchAhead < len(order) {
			ha := hashes[order[j+prefetchAhead]]
			x.shardOf(ha).prefetchHome(ha)
		}
		h := hashes[i]
		if s := x.shardOf(h); s != locked {
			if locked != nil {
				locked.mu.Unlock()
			}
			s.mu.Lock()
			locked = s
		}
		f(locked, h)
	}
	locked.mu.Unlock()
}

// shardBatch is eachLocked's scratch: where each shard's hashes start in
// order (then end, once placed), and the batch's positions sorted by shard.
type shardBatch struct{ start, order []int32 }

var shardBatches = sync.Pool{New: func() any { return new(shardBatch) }}

// maxKeptBatch is the longest batch whose scratch goes back to the pool: a
// longer one (an index filled in one call) is left to the collector.
const maxKeptBatch = 1 << 16

// nowMs is the clock in wrapping milliseconds since the index was made.
func (x *Index) nowMs() uint32 {
	return uint32(x.now().Sub(x.epoch).Milliseconds())
}

// Stored records that pod stored the blocks hashes in tier (a BlockStored
// event). Storing a hash the pod already holds in that tier adds a count.
func (x *Index) Stored(pod PodID, tier Tier, hashes []uint64) error {
	if err := x.checkOp(pod, tier); err != nil {
		return err
	}
	var n opCounts
	now := x.nowMs()
	x.eachLocked(hashes, func(s *shard, h uint64) { s.storeLocked(h, pod.index(), tier, x.limit, now, &n) })
	x.metrics.record(&n, len(hashes), 0)
	return nil
}

// Removed records that pod evicted the blocks hashes from tier (a
// BlockRemoved event). Removing an absent entry is counted and ignored.
func (x *Index) Removed(pod PodID, tier Tier, hashes []uint64) error {
	if err := x.checkOp(pod, tier); err != nil {
		return err
	}
	var n opCounts
	x.eachLocked(hashes, func(s *shard, h uint64) { s.removeLocked(h, pod.index(), tier, &n) })
	x.metrics.record(&n, 0, len(hashes))
	return nil
}

// SpeculativeTTL is Config.SpeculativeTTL: how long a speculative entry
// counts at most.
func (x *Index) SpeculativeTTL() time.Duration { return x.cfg.SpeculativeTTL }

// SpeculativeGrace is Config.SpeculativeGrace: how long a settled
// speculative entry still counts.
func (x *Index) SpeculativeGrace() time.Duration { return x.cfg.SpeculativeGrace }

// Speculate records that a routing decision just sent a request with these
// block hashes to pod: they count in matches (reported apart) until the
// pod's own event confirms them, until Settle shortens their life once the
// request is prefilled, or at most Config.SpeculativeTTL. Blocks the pod
// already holds speculatively, for another request, get the new deadline.
// Blocks it holds for real get a speculative entry too, which matches
// count only once the real one is gone: a pod that evicts a block while
// the request waits computes it again for the request, and a request
// routed behind it still finds it there.
func (x *Index) Speculate(pod PodID, hashes []uint64) error {
	if err := x.checkPod(pod); err != nil {
		return err
	}
	var n opCounts
	now := x.nowMs()
	deadline := now + uint32(x.cfg.SpeculativeTTL.Milliseconds())
	x.eachLocked(hashes, func(s *shard, h uint64) { s.speculateLocked(h, pod.index(), x.limit, now, deadline, &n) })
	x.metrics.speculated(&n)
	return nil
}

// Settle records that the request a decision speculated hashes on pod for
// has been prefilled, or has ended without: the pod's speculative entries
// of those blocks count for at most Config.SpeculativeGrace more, time
// enough for the pod's BlockStored events to confirm the blocks it
// computed. Real entries and blocks without a speculative entry are left
// alone.
func (x *Index) Settle(pod PodID, hashes []uint64) error {
	if err := x.checkPod(pod); err != nil {
		return err
	}
	var n opCounts
	now := x.nowMs()
	deadline := now + uint32(x.cfg.SpeculativeGrace.Milliseconds())
	x.eachLocked(hashes, func(s *shard, h uint64) { s.settleLocked(h, pod.index(), now, deadline, &n) })
	x.metrics.settledSpec(&n)
	return nil
}

const allTiers = 1<<NumTiers - 1

// ClearPod removes every entry of pod (an AllBlocksCleared event, or a pod
// that restarted).
func (x *Index) ClearPod(pod PodID) error {
	if err := x.checkPod(pod); err != nil {
		return err
	}
	x.clear(pod, allTiers)
	return nil
}

// ClearTier removes pod's entries in one tier.
func (x *Index) ClearTier(pod PodID, tier Tier) error {
	if err := x.checkOp(pod, tier); err != nil {
		return err
	}
	x.clear(pod, 1<<tier)
	return nil
}

func (x *Index) clear(pod PodID, mask uint8) {
	var n opCounts
	for _, s := range x.shards {
		s.mu.Lock()
		s.clearPodLocked(pod.index(), mask, &n)
		s.mu.Unlock()
	}
	x.metrics.cleared.Add(float64(n.cleared))
}

// Holds reports whether pod holds the block hash for real, in any tier
// (a speculative entry does not count). A stale handle holds nothing.
func (x *Index) Holds(pod PodID, hash uint64) bool {
	if x.checkPod(pod) != nil {
		return false
	}
	s := x.shardOf(hash)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, h := range x.holdersLocked(hash) {
		if h.slot() == pod.index() && !h.spec() {
			return true
		}
	}
	return false
}

// PodEntries returns the number of entries pod holds, speculative included.
func (x *Index) PodEntries(pod PodID) int {
	total := 0
	for _, s := range x.shards {
		s.mu.Lock()
		total += s.podEntriesLocked(pod.index())
		s.mu.Unlock()
	}
	return total
}

// Len returns the number of entries: real, and speculative ones not yet
// freed.
func (x *Index) Len() (entries, speculative int) {
	for _, s := range x.shards {
		s.mu.Lock()
		entries += s.mu.real
		speculative += s.mu.spec
		s.mu.Unlock()
	}
	return entries, speculative
}

// Sweep frees expired speculative entries now. Writes do it as they go; a
// caller with a quiet index may call Sweep periodically.
func (x *Index) Sweep() {
	now := x.nowMs()
	for _, s := range x.shards {
		s.mu.Lock()
		s.expireLocked(now)
		s.mu.Unlock()
	}
}

// Entries calls fn for each real entry of pod: the block hash, its tier and
// how many times the pod stored it. Speculative entries are left out. Each
// shard is locked while its entries are visited, so fn must not call back
// into the index. A stale handle visits nothing and returns ErrUnknownPod.
func (x *Index) Entries(pod PodID, fn func(hash uint64, tier Tier, count int)) error {
	if err := x.checkPod(pod); err != nil {
		return err
	}
	for _, s := range x.shards {
		s.mu.Lock()
		s.entriesLocked(pod.index(), fn)
		s.mu.Unlock()
	}
	return nil
}
