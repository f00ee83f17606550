package fleet

import (
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
)

// Index is where the fleet registers its pods: a *kvindex.Index or an
// index backend wrapping one.
type Index interface {
	// AddPod registers a pod serving the base model namespace and returns
	// its handle; see kvindex.Index.AddPod.
	AddPod(name, namespace string) kvindex.PodID
}

// Fleet is the router's view of the pods: which serve which model names,
// which are ready, and how loaded each is. Reads take an immutable Snapshot;
// updates (from the pod sources) build a new one. Safe for concurrent use.
type Fleet struct {
	index Index
	mu    sync.Mutex // serializes updates
	snap  atomic.Pointer[Snapshot]
	// scraped is set by Scraper.Run: from then on the pods' figures come
	// from scrapes, and a pod without them is blind (Load.Metrics). A fleet
	// nobody scrapes (metrics off, tests, the fleet simulator) has no blind
	// pods: its figures are whatever its owner stores.
	scraped atomic.Bool
	// known holds every model name a pod ever served (base, alias or LoRA),
	// copied on write: a model whose pods are all gone is unavailable (503),
	// one never known is not found (404).
	known atomic.Pointer[map[string]bool]
	// changed is closed and replaced at each change (Changed).
	changed atomic.Pointer[chan struct{}]
}

// Snapshot is the fleet at one moment. It is never modified.
type Snapshot struct {
	pods    map[string]*Member // by pod name
	models  map[string]*Target // by request model name
	ordered []*Member          // by pod name
}

// Member is a pod in the fleet with its index handle and live load.
type Member struct {
	// Pod is what the pod's source reported.
	Pod pod.Pod
	// Endpoint is Pod.Endpoint(), computed once.
	Endpoint string
	// ID is the pod's handle in the index.
	ID kvindex.PodID
	// Load is the pod's live load; it survives updates that keep the pod's
	// endpoint and model.
	Load *Load
}

// Target is what a request's model name resolves to.
type Target struct {
	// Base is the base model: the index namespace and the tokenizer's name.
	Base string
	// LoRA is the adapter name, the hashes' extra key; "" for the base model.
	LoRA string
	// Members are the pods serving it, ready or not, by name.
	Members []*Member
}

// Load is one pod's load as the router sees it: its own in-flight requests
// and the prompt tokens they still have to prefill, and the queue the pod
// reports in its metrics.
type Load struct {
	InFlight        atomic.Int64 // requests routed here and not finished
	PrefillTokens   atomic.Int64 // prefill routed here, not yet done: uncached prompt tokens weighed by their context
	Prefilling      atomic.Int64 // requests routed here, not yet prefilled
	PrefillSince    atomic.Int64 // unix nanoseconds: when the pod began the oldest of them, as far as the router knows (see router.Router.queue)
	Waiting         atomic.Int64 // vllm:num_requests_waiting
	Running         atomic.Int64 // vllm:num_requests_running
	KVUsagePermille atomic.Int64 // vllm:kv_cache_usage_perc × 1000
	// KVCapacity is the tokens the pod's KV cache holds
	// (vllm:cache_config_info); 0 while unknown.
	KVCapacity atomic.Int64
	// Queued is the prompt tokens of the requests routed here and not yet
	// prefilled, cached or not: the blocks the pod allocates or touches
	// before a new request's turn.
	Queued atomic.Int64
	// Charged is the prompt tokens of all the requests routed here since
	// the pod was added, each times the pod's MissShare when it was
	// routed, in ChargedUnits: a clock of the blocks the pod allocates,
	// which the SpecLedger's claims are marked with.
	Charged      atomic.Int64
	ScrapedAt    atomic.Int64 // unix nanoseconds of the last successful scrape; 0: none yet
	FailingSince atomic.Int64 // unix nanoseconds of the first of the current run of failed scrapes; 0: the last scrape succeeded, or none has ended
	speed        atomic.Pointer[Speed]
	reuse        atomic.Uint64 // float64 bits: see Reuse
	hits         cacheHits     // see MissShare
	// Spec counts the router's decisions in flight here by the blocks
	// they speculated.
	Spec SpecLedger
}

// SpecLedger counts, per block, the router's decisions routed to one pod
// and not yet prefilled that speculated the block there, so that the
// index hears of a block's speculation once for a burst of requests
// sharing it: when the first of them is routed (and again every refresh
// while more follow), and of its settling when the last is prefilled. A
// speculative entry then lives while any request that will compute the
// block waits, where one index entry per request would be shortened by
// the first request's settling; and a shared index (redisindex) writes a
// hot prefix's speculation once, not twice per request.
type SpecLedger struct {
	mu     sync.Mutex
	chains specTree
}

// specCount is the claims of a run of blocks by decisions in flight,
// when the index was last told of their speculation (unix ms), and the
// pod's Load.Charged when the last of them claimed it.
type specCount struct {
	n    uint32
	told int64
	mark int64
}

// Claim counts a decision's speculation of hashes, a prompt's chain from
// its first block, and appends to dst the blocks the index must be told
// of: those no other decision in flight speculated, those it was last
// told of refresh or longer before now, and with all every one (the index
// may have dropped an entry it was told of: a pod's store of the block
// confirms and ends its speculative holder). mark is the pod's
// Load.Charged with the decision's own prompt counted.
func (s *SpecLedger) Claim(dst, hashes []uint64, now time.Time, refresh time.Duration, all bool, mark int64) []uint64 {
	ms, every := now.UnixMilli(), refresh.Milliseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chains.claim(hashes, func(run []uint64, c *specCount) {
		if all || c.n == 0 || ms-c.told >= every {
			dst = append(dst, run...)
			c.told = ms
		}
		c.mark = max(c.mark, mark) // a decision that read the clock before another's claim keeps the later mark
	})
	return dst
}

// Release ends a decision's speculation of hashes, as Claim counted it,
// and appends to dst the blocks no decision in flight speculates any more:
// those the index must settle. dst may be hashes[:0]: the blocks appended
// are never ahead of those read.
func (s *SpecLedger) Release(dst, hashes []uint64) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chains.release(dst, hashes)
}

// Fresh is how many of hashes (a prompt's chain), leading, a decision in
// flight claimed after the pod's Load.Charged passed since: the blocks a
// queued request will use before the pod allocates the cache's worth of
// blocks that since stands for. A decision claims its prompt's chain from
// the first block, so a block's last claim is no older than any later
// block's, and Fresh stops at the first block claimed before.
func (s *SpecLedger) Fresh(hashes []uint64, since int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chains.fresh(hashes, since)
}

// Speculated is the number of blocks decisions in flight speculated.
func (s *SpecLedger) Speculated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chains.blocks
}

// Speed is what the pod's metrics taught of its prefill speed; nil while
// nothing is.
func (l *Load) Speed() *Speed { return l.speed.Load() }

// SetSpeed stores what was learned of the pod's prefill speed, as the
// Scraper does; the fleet simulator feeds its own SpeedEstimator.
func (l *Load) SetSpeed(s *Speed) { l.speed.Store(s) }

// PrefillSecondsPerToken is the pod's predicted prefill cost of one token
// at no context: Speed.SecondsPerToken of what was learned, the prior
// while nothing is. It allocates nothing.
func (l *Load) PrefillSecondsPerToken(prior, attention float64) float64 {
	return l.speed.Load().SecondsPerToken(prior, attention)
}

// ChargedUnit is Load.Charged's units per token: fine enough that a short
// prompt on a pod whose cache hits nearly everything still moves it.
const ChargedUnit = 1000

// cacheHits follows a pod's prefix-cache counters: the decayed sums of
// the tokens queried and hit, and the share missed (float64 bits) read by
// MissShare; 0 bits: unknown.
type cacheHits struct {
	mu            sync.Mutex
	last          Counters
	at            time.Time
	queried, hits float64
	miss          atomic.Uint64
}

// MissHalfLife is how fast ObserveCache forgets: a scrape's tokens count
// half as much this much later.
const MissHalfLife = 10 * time.Second

// MissShare is the share of the prompt tokens the pod's prefix cache
// missed lately (vllm:prefix_cache_queries_total and _hits_total, as
// ObserveCache folds them): the share of a prompt routed there that
// allocates new blocks. 1 while its metrics have shown none: no block is
// taken for a hit the pod has not shown it gives.
func (l *Load) MissShare() float64 {
	if b := l.hits.miss.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// ObserveCache folds the prefix-cache counters of a scrape taken at now
// into MissShare: the tokens queried and hit since the last scrape, over
// sums that fade with MissHalfLife. A counter that goes back (the pod
// restarted) starts afresh.
func (l *Load) ObserveCache(now time.Time, c Counters) {
	h := &l.hits
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.Has&(HasCacheQueries|HasCacheHits) != HasCacheQueries|HasCacheHits {
		return
	}
	last, at := h.last, h.at
	h.last, h.at = c, now
	if at.IsZero() || back(last, c) || now.Before(at) {
		return
	}
	q, hit := c.CacheQueries-last.CacheQueries, c.CacheHits-last.CacheHits
	if q <= 0 {
		return
	}
	fade := math.Exp2(-now.Sub(at).Seconds() / MissHalfLife.Seconds())
	h.queried = h.queried*fade + q
	h.hits = h.hits*fade + min(hit, q)
	h.miss.Store(math.Float64bits(max(1-h.hits/h.queried, math.SmallestNonzeroFloat64)))
}

// Reuse is the running mean, over the recent requests routed to the pod,
// of the share of each prompt's blocks the best candidate had cached: how
// often this workload finds what a cache holds. 0 before any.
func (l *Load) Reuse() float64 { return math.Float64frombits(l.reuse.Load()) }

// FoldReuse folds one request's share (0..1) into Reuse, a mean over
// about window requests. Concurrent folds may lose one another's update,
// which a running mean can afford.
func (l *Load) FoldReuse(share float64, window int) {
	old := l.Reuse()
	l.reuse.Store(math.Float64bits(old + (share-old)/float64(max(window, 1))))
}

// New returns an empty fleet whose pods are registered in index.
func New(index Index) *Fleet {
	f := &Fleet{index: index}
	f.snap.Store(&Snapshot{pods: map[string]*Member{}, models: map[string]*Target{}})
	f.known.Store(&map[string]bool{})
	ch := make(chan struct{})
	f.changed.Store(&ch)
	return f
}

// Changed is closed at the fleet's next change (a pod added, changed or
// removed): a waiter reads it, then the snapshot, then waits on it.
func (f *Fleet) Changed() <-chan struct{} { return *f.changed.Load() }

// publish stores next as the fleet's snapshot and wakes Changed's
// waiters. Called with f.mu.
func (f *Fleet) publish(next *Snapshot) {
	f.snap.Store(next)
	ch := make(chan struct{})
	close(*f.changed.Swap(&ch))
}

// Known reports whether any pod ever served model, though none may now.
func (f *Fleet) Known(model string) bool { return (*f.known.Load())[model] }

// Snapshot returns the fleet as it is now.
func (f *Fleet) Snapshot() *Snapshot { return f.snap.Load() }

// Upsert adds p or replaces what is known of it. A pod that keeps its
// endpoint and model keeps its load.
func (f *Fleet) Upsert(p pod.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.snap.Load()
	pods := make(map[string]*Member, len(old.pods)+1)
	for n, m := range old.pods {
		pods[n] = m
	}
	m := &Member{Pod: p, Endpoint: p.Endpoint(), Load: &Load{}}
	m.Pod.Aliases, m.Pod.LoRAs = slices.Clone(p.Aliases), slices.Clone(p.LoRAs)
	if prev, ok := old.pods[p.Name]; ok && prev.Endpoint == m.Endpoint && prev.Pod.Model == p.Model {
		m.Load = prev.Load
	}
	m.ID = f.index.AddPod(p.Name, p.Model)
	pods[p.Name] = m
	next := buildSnapshot(pods)
	f.publish(next)
	known := *f.known.Load()
	for name := range next.models {
		if !known[name] {
			grown := maps.Clone(known)
			for name := range next.models {
				grown[name] = true
			}
			f.known.Store(&grown)
			break
		}
	}
}

// Remove forgets the named pod; its index entries stay until its event
// subscriber is removed.
func (f *Fleet) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.snap.Load()
	if _, ok := old.pods[name]; !ok {
		return
	}
	pods := make(map[string]*Member, len(old.pods))
	for n, m := range old.pods {
		if n != name {
			pods[n] = m
		}
	}
	f.publish(buildSnapshot(pods))
}

// Load returns the named pod's load, or nil for an unknown pod.
func (f *Fleet) Load(name string) *Load {
	if m, ok := f.snap.Load().pods[name]; ok {
		return m.Load
	}
	return nil
}

// Pods returns the pods, sorted by name.
func (f *Fleet) Pods() []pod.Pod {
	s := f.snap.Load()
	out := make([]pod.Pod, len(s.ordered))
	for i, m := range s.ordered {
		out[i] = m.Pod
	}
	return out
}

// Scraped reports whether a Scraper runs for this fleet: only then can a
// pod's figures be missing or stale.
func (f *Fleet) Scraped() bool { return f.scraped.Load() }

// Target returns what a request's model name resolves to, or nil.
func (s *Snapshot) Target(model string) *Target { return s.models[model] }

// Member returns the named pod, or nil.
func (s *Snapshot) Member(name string) *Member { return s.pods[name] }

// Members returns every pod, sorted by name. The slice is shared: do not
// modify it.
func (s *Snapshot) Members() []*Member { return s.ordered }

func buildSnapshot(pods map[string]*Member) *Snapshot {
	s := &Snapshot{pods: pods, models: map[string]*Target{}, ordered: make([]*Member, 0, len(pods))}
	for _, m := range pods {
		s.ordered = append(s.ordered, m)
	}
	slices.SortFunc(s.ordered, func(a, b *Member) int { return strings.Compare(a.Pod.Name, b.Pod.Name) })
	add := func(name, base, lora string, m *Member) {
		t := s.models[name]
		if t == nil {
			t = &Target{Base: base, LoRA: lora}
			s.models[name] = t
		}
		if t.Base == base && t.LoRA == lora {
			t.Members = append(t.Members, m)
		}
	}
	for _, m := range s.ordered { // deterministic candidate order
		add(m.Pod.Model, m.Pod.Model, "", m)
		for _, a := range m.Pod.Aliases {
			add(a, m.Pod.Model, "", m)
		}
		for _, l := range m.Pod.LoRAs {
			add(l, m.Pod.Model, l, m)
		}
	}
	return s
}
