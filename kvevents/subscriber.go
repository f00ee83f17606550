package kvevents

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Subscriber follows one pod: one stream (SUB socket, replay DEALER) per DP
// rank, all feeding one bounded queue drained by one applier, so the pod's
// batches reach the index in order.
type Subscriber struct {
	cfg     Config
	pod     pod.Pod
	log     *slog.Logger
	applier *applier
	streams []*stream
	ranks   []*rankState
	queue   chan item
	state   atomic.Uint32 // Verification, for Status
	rekeyed atomic.Bool   // the pod's entries are kvrouter's hashes, for Status
	groups  atomic.Pointer[[]Group]
	engine  string // the pod's engine, its default resolved
}

// newSubscriber returns a subscriber that applies pod's events to idx under
// handle id. hasher verifies the events' hashes (nil: no verification); m
// holds the pod's metrics. It starts nothing: call Run.
func newSubscriber(cfg Config, pod pod.Pod, idx Index, id kvindex.PodID, hasher *blockhash.Hasher,
	log *slog.Logger, m *podMetrics,
) *Subscriber {
	s := &Subscriber{cfg: cfg, pod: pod, log: log, queue: make(chan item, cfg.QueueSize)}
	v := newVerifier(&s.cfg, hasher, pod.Name, log, m)
	v.onChange = func(st Verification) { s.state.Store(uint32(st)) }
	rk := newRekeyer(&s.cfg, hasher, pod.Name, log, m)
	if rk != nil {
		rk.onChange = s.rekeyed.Store
	}
	bs := 0
	if hasher != nil {
		bs = hasher.BlockSize()
	}
	g := newGroups(log, pod.Name, bs)
	g.onChange = func(gs []Group) { s.groups.Store(&gs) }
	s.applier = newApplier(idx, id, pod.Name, v, rk, g, m)
	s.engine = engineOf(pod, cfg.DefaultEngine)
	if s.engine != vllm {
		s.applier.foreign = true
		if rk != nil {
			rk.follow(s.engine)
		} else {
			log.Warn("kvevents: the pod's engine names blocks by ids of its own, and rekeying is off (no hash configuration, or RekeyBlocks 0): its events are not indexed",
				"pod", pod.Name, "engine", s.engine)
		}
	}
	for r := range max(pod.DPSize, 1) {
		state := m.rank(r)
		s.ranks = append(s.ranks, state)
		s.streams = append(s.streams, &stream{
			cfg: &s.cfg, pod: pod, rank: r, out: s.queue, log: log, m: m,
			state: state,
		})
	}
	return s
}

// vllm is the engine whose block hashes are kvrouter's.
const vllm = pod.EngineVLLM

// engineOf is p's engine, def when it names none, vLLM when neither does.
func engineOf(p pod.Pod, def string) string {
	return cmp.Or(p.Engine, def, vllm)
}

// Ranks returns the connection state and last applied sequence number of
// each of the pod's DP ranks.
func (s *Subscriber) Ranks() []RankStatus {
	out := make([]RankStatus, len(s.ranks))
	for i, r := range s.ranks {
		out[i] = RankStatus{Rank: r.rank, Connected: r.up.Load(), LastSeq: r.seq.Load(), Source: r.source.Load()}
	}
	return out
}

// Verification returns the pod's hash verification state.
func (s *Subscriber) Verification() Verification { return Verification(s.state.Load()) }

// Rekeyed reports whether the pod's index entries are kvrouter's own hashes
// of its events' token ids, its own having failed verification.
func (s *Subscriber) Rekeyed() bool { return s.rekeyed.Load() }

// Groups returns the pod's KV-cache groups its events have named, by index.
func (s *Subscriber) Groups() []Group {
	if gs := s.groups.Load(); gs != nil {
		return *gs
	}
	return nil
}

// Run follows the pod until ctx is done, then returns nil once every
// goroutine it started has exited and every socket is closed.
func (s *Subscriber) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, st := range s.streams {
		wg.Go(func() { st.run(ctx) })
	}
	s.applyLoop(ctx)
	wg.Wait()
	return nil
}

// applyLoop drains the queue into the index until ctx is done.
func (s *Subscriber) applyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-s.queue:
			var err error
			if it.clear != clearNone {
				err = s.applier.clear(it.clear, s.log, s.pod.Name)
			} else {
				err = s.applier.applyPayload(it.payload)
				it.rank.applied(it.seq)
			}
			if err != nil && s.log.Enabled(ctx, slog.LevelDebug) {
				s.log.Debug("kvevents: batch not applied", "pod", s.pod.Name, "err", err)
			}
		}
	}
}
