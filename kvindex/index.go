package kvindex

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PodID is a pod's handle in an Index, from AddPod. IDs are never reused, so
// a stale handle can never touch another pod's entries.
type PodID uint32

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
		info   []podInfo // by PodID
	}
}

type podInfo struct {
	name      string
	namespace string
	live      bool
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
		x.shards[i] = newShard()
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
	id, ok := x.pods.byName[name]
	if ok && x.pods.info[id].namespace == namespace {
		x.pods.Unlock()
		return id
	}
	if ok {
		x.pods.info[id].live = false
	}
	nid := PodID(len(x.pods.info))
	x.pods.info = append(x.pods.info, podInfo{name: name, namespace: namespace, live: true})
	x.pods.byName[name] = nid
	x.pods.Unlock()
	if ok {
		x.clear(id, allTiers)
	}
	return nid
}

// RemovePod clears a pod's entries and retires its handle.
func (x *Index) RemovePod(id PodID) error {
	x.pods.Lock()
	if err := x.checkPodLocked(id); err != nil {
		x.pods.Unlock()
		return err
	}
	x.pods.info[id].live = false
	delete(x.pods.byName, x.pods.info[id].name)
	x.pods.Unlock()
	x.clear(id, allTiers)
	return nil
}

// Pod returns the handle of a registered pod name.
func (x *Index) Pod(name string) (PodID, bool) {
	x.pods.RLock()
	defer x.pods.RUnlock()
	id, ok := x.pods.byName[name]
	return id, ok
}

// PodName returns the name id was added with.
func (x *Index) PodName(id PodID) string {
	x.pods.RLock()
	defer x.pods.RUnlock()
	if int(id) < len(x.pods.info) {
		return x.pods.info[id].name
	}
	return ""
}

func (x *Index) checkPodLocked(id PodID) error {
	if int(id) >= len(x.pods.info) || !x.pods.info[id].live {
		return fmt.Errorf("%w: id %d", ErrUnknownPod, id)
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

func (x *Index) shardOf(h uint64) *shard {
	return x.shards[(h^h>>29)&x.mask]
}

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
	for _, h := range hashes {
		s := x.shardOf(h)
		s.mu.Lock()
		s.storeLocked(h, uint32(pod), tier, x.limit, now, &n)
		s.mu.Unlock()
	}
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
	for _, h := range hashes {
		s := x.shardOf(h)
		s.mu.Lock()
		s.removeLocked(h, uint32(pod), tier, &n)
		s.mu.Unlock()
	}
	x.metrics.record(&n, 0, len(hashes))
	return nil
}

// Speculate records that a routing decision just sent a request with these
// block hashes to pod: until Config.SpeculativeTTL passes or the pod's own
// event confirms them, they count in matches (reported apart).
func (x *Index) Speculate(pod PodID, hashes []uint64) error {
	if err := x.checkPod(pod); err != nil {
		return err
	}
	var n opCounts
	now := x.nowMs()
	deadline := now + uint32(x.cfg.SpeculativeTTL.Milliseconds())
	for _, h := range hashes {
		s := x.shardOf(h)
		s.mu.Lock()
		s.speculateLocked(h, uint32(pod), x.limit, now, deadline, &n)
		s.mu.Unlock()
	}
	x.metrics.speculated(&n)
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
		s.clearPodLocked(uint32(pod), mask, &n)
		s.mu.Unlock()
	}
	x.metrics.cleared.Add(float64(n.cleared))
}

// PodEntries returns the number of entries pod holds, speculative included.
func (x *Index) PodEntries(pod PodID) int {
	total := 0
	for _, s := range x.shards {
		s.mu.Lock()
		total += s.podEntriesLocked(uint32(pod))
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
		speculative += s.mu.queued
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
