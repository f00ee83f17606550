package kvevents

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// PodIndex is the part of kvindex.Index the Manager uses: registering pods
// and writing their events.
type PodIndex interface {
	Index
	AddPod(name, namespace string) kvindex.PodID
	RemovePod(id kvindex.PodID) error
}

// Manager runs one Subscriber per pod it is told about. Ensure and Remove
// may be called from any goroutine, before or during Run; Run applies them
// in order, each pod in its own goroutines, so pods proceed in parallel and
// each pod's events stay in order.
type Manager struct {
	cfg     Config
	idx     PodIndex
	hasher  *blockhash.Hasher
	log     *slog.Logger
	metrics *metrics
	wake    chan struct{}  // one pending reconcile
	wg      sync.WaitGroup // the subscribers' goroutines, stopped or not

	mu struct {
		sync.Mutex
		want    map[string]pod.Pod     // the pods to follow
		running map[string]*runningPod // owned by Run; read by Status
	}
}

type runningPod struct {
	pod    pod.Pod
	id     kvindex.PodID
	sub    *Subscriber
	cancel context.CancelFunc
}

// PodStatus is one followed pod's state.
type PodStatus struct {
	Name         string
	Engine       string // vllm, sglang or trtllm
	Verification Verification
	// Rekeyed is true while the pod's index entries are kvrouter's own
	// hashes of its events' token ids (its own failed verification).
	Rekeyed bool
	Ranks   []RankStatus
	// Groups are the pod's KV-cache groups its events have named.
	Groups []Group
}

// RankStatus is the state of one DP rank of a followed pod.
type RankStatus struct {
	Rank      int   `json:"rank"`
	Connected bool  `json:"connected"`
	LastSeq   int64 `json:"last_seq"` // -1 until a batch was applied
	// Source is where the rank publishes, as last looked up; nil before.
	Source *Source `json:"source,omitempty"`
}

// NewManager returns a Manager writing to idx and registering its metrics
// on reg (nil registers none). It starts nothing: call Run.
func NewManager(cfg Config, idx PodIndex, reg prometheus.Registerer, log *slog.Logger) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, idx: idx, log: log, wake: make(chan struct{}, 1)}
	if cfg.Hash.Algorithm != "" {
		h, err := blockhash.NewHasher(cfg.Hash)
		if err != nil {
			return nil, fmt.Errorf("kvevents: hasher: %w", err)
		}
		m.hasher = h
	}
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.metrics = met
	m.mu.want = make(map[string]pod.Pod)
	m.mu.running = make(map[string]*runningPod)
	return m, nil
}

// Ensure follows pod, replacing a pod of the same name whose address,
// ports, model or DP size differ (its entries are cleared). Ensuring the
// same pod again does nothing.
func (m *Manager) Ensure(pod pod.Pod) error {
	if err := pod.Validate(); err != nil {
		return fmt.Errorf("kvevents: %w", err)
	}
	m.mu.Lock()
	m.mu.want[pod.Name] = pod
	m.mu.Unlock()
	m.poke()
	return nil
}

// Remove stops following the named pod and clears its entries; removing an
// unknown pod does nothing.
func (m *Manager) Remove(name string) {
	m.mu.Lock()
	delete(m.mu.want, name)
	m.mu.Unlock()
	m.poke()
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Status returns the followed pods' states, sorted by name.
func (m *Manager) Status() []PodStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PodStatus, 0, len(m.mu.running))
	for name, r := range m.mu.running {
		out = append(out, PodStatus{Name: name, Engine: r.sub.engine, Verification: r.sub.Verification(), Rekeyed: r.sub.Rekeyed(), Ranks: r.sub.Ranks(), Groups: r.sub.Groups()})
	}
	slices.SortFunc(out, func(a, b PodStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Run follows the pods until ctx is done, then stops every subscriber and
// returns nil once all have exited.
func (m *Manager) Run(ctx context.Context) error {
	for {
		m.reconcile(ctx)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			running := m.mu.running
			m.mu.running = map[string]*runningPod{}
			m.mu.Unlock()
			for _, r := range running {
				r.cancel()
			}
			m.wg.Wait()
			return nil
		case <-m.wake:
		}
	}
}

// reconcile stops the subscribers of pods no longer wanted (or changed) and
// starts those of new ones.
func (m *Manager) reconcile(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, r := range m.mu.running {
		if want, ok := m.mu.want[name]; ok && sameStream(want, r.pod) {
			continue
		}
		m.stopLocked(r)
		delete(m.mu.running, name)
	}
	for name, pod := range m.mu.want {
		if _, ok := m.mu.running[name]; ok {
			continue
		}
		m.mu.running[name] = m.startLocked(ctx, pod)
	}
}

func (m *Manager) startLocked(ctx context.Context, pod pod.Pod) *runningPod {
	id := m.idx.AddPod(pod.Name, pod.Model)
	sub := newSubscriber(m.cfg, pod, m.idx, id, m.hasher, m.log, m.metrics.forPod(pod.Name))
	sctx, cancel := context.WithCancel(ctx)
	r := &runningPod{pod: pod, id: id, sub: sub, cancel: cancel}
	m.wg.Go(func() {
		_ = sub.Run(sctx) // returns nil; errors are logged and counted inside
	})
	m.log.Info("kvevents: following pod", "pod", pod.Name, "ip", pod.IP, "model", pod.Model, "dp_size", max(pod.DPSize, 1))
	return r
}

// stopLocked cancels r's subscriber and forgets the pod: its handle is
// retired at once (a late write from the exiting subscriber fails), its
// entries cleared and its metric series deleted.
func (m *Manager) stopLocked(r *runningPod) {
	r.cancel()
	if err := m.idx.RemovePod(r.id); err != nil {
		m.log.Warn("kvevents: remove pod from index", "pod", r.pod.Name, "err", err)
	}
	m.metrics.forgetPod(r.pod.Name)
	m.log.Info("kvevents: stopped following pod", "pod", r.pod.Name)
}

// sameStream reports whether a and b publish the same KV events: the
// subscriber of a can go on following b.
// Another engine names its blocks otherwise (foreign pods): a new one.
func sameStream(a, b pod.Pod) bool {
	return a.Name == b.Name && a.IP == b.IP && a.Model == b.Model && a.DPSize == b.DPSize &&
		a.EventPort == b.EventPort && a.ReplayPort == b.ReplayPort && a.Engine == b.Engine
}
