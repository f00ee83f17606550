package fleetsim

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// replicaIndex is what a replica's router, fleet and event feed use: a
// *kvindex.Index (private speculation) or a *redisindex.Index (shared).
type replicaIndex interface {
	router.Index
	fleet.Index
	eventApplier
}

// replica is one kvrouter replica: its own router, fleet (its own
// in-flight load) and index.
type replica struct {
	index  replicaIndex
	fleet  *fleet.Fleet
	r      *router.Router
	pods   []kvindex.PodID
	byName map[string]int
}

// Replicated is kvrouter run as several replicas behind a gateway that
// spreads requests over them round robin. Every replica follows every
// pod's events and scrapes. With RedisAddr set the replicas share one
// index through that Redis (index.backend: redis: shared entries and
// speculation; replica 0 holds every pod's writer lease); without, each
// keeps its own (the memory backend: private speculation). The replicas
// share their in-flight prefill through that Redis too, unless
// PrivateLoad, and their homes, unless PrivateHomes: each replica's
// index ticks (redisindex.Index.Renew) every LeaseTTL/3 of the sim's
// time, and shares the homes (SyncHomes) every HomeSync, as Run does.
type Replicated struct {
	Replicas  int
	RedisAddr string
	// PrivateLoad keeps each replica's in-flight prefill its own with
	// RedisAddr (redisindex.Config.NoSharedLoad): shared speculation alone.
	PrivateLoad bool
	// PrivateHomes keeps each replica's homes its own with RedisAddr
	// (redisindex.Config.NoSharedHomes).
	PrivateHomes bool
	// Prefix keeps one run's keys apart from another's on the server.
	Prefix string
}

// Policy returns the policy's constructor.
func (c Replicated) Policy() NewPolicy {
	return func(s *Sim) (Policy, error) { return c.build(s) }
}

type replicated struct {
	s     *Sim
	reps  []*replica
	next  int
	owner []int32 // by request ID: the replica that routed it
	dec   []*router.Decision
	body  []byte
	batch []uint64
	// tickAt and syncAt are when the indexes tick and share their homes
	// next (with RedisAddr), in the sim's seconds.
	tickAt, syncAt float64
}

func (c Replicated) build(s *Sim) (*replicated, error) {
	if c.Replicas < 1 {
		return nil, fmt.Errorf("fleetsim: %d replicas, want at least 1", c.Replicas)
	}
	p := &replicated{s: s, owner: make([]int32, len(s.w.Requests)), dec: make([]*router.Decision, len(s.w.Requests))}
	now := s.Clock
	hasher, err := blockhash.NewHasher(s.w.Hash)
	if err != nil {
		return nil, err
	}
	for i := range c.Replicas {
		icfg := kvindex.DefaultConfig()
		icfg.Shards, icfg.Now = 16, now
		local, err := kvindex.New(icfg, prometheus.NewRegistry())
		if err != nil {
			return nil, err
		}
		var idx replicaIndex = local
		if c.RedisAddr != "" {
			rcfg := redisindex.DefaultConfig()
			rcfg.Addrs, rcfg.Prefix, rcfg.Now = []string{c.RedisAddr}, c.Prefix, now
			rcfg.Replica, rcfg.Timeout = strconv.Itoa(i), 5*time.Second
			rcfg.NoSharedLoad, rcfg.NoSharedHomes = c.PrivateLoad, c.PrivateHomes
			if idx, err = redisindex.New(rcfg, local, icfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry()); err != nil {
				return nil, err
			}
		}
		rep := &replica{index: idx, fleet: fleet.New(idx), byName: map[string]int{}}
		for j := range s.Pods() {
			name := fmt.Sprintf("pod-%03d", j)
			rep.fleet.Upsert(kvpod.Pod{Name: name, IP: fmt.Sprintf("10.0.%d.%d", j/250, j%250+1), Port: 8000, Model: simModel, Ready: true})
			id, ok := local.Pod(name)
			if !ok {
				return nil, fmt.Errorf("fleetsim: pod %s not in the index", name)
			}
			rep.pods = append(rep.pods, id)
			rep.byName[name] = j
		}
		rc := RouterConfig(s)
		rc.QueuePrefillsPerPod = 0 // the replicas route every request at once: their comparison is of shared speculation
		if rep.r, err = router.New(rc, rep.fleet, idx, hasher, simTokenizer{s.w}, slog.New(slog.DiscardHandler), prometheus.NewRegistry()); err != nil {
			return nil, err
		}
		if x, ok := idx.(*redisindex.Index); ok {
			x.ShareHomes(rep.r)
		}
		p.reps = append(p.reps, rep)
	}
	for _, rep := range p.reps { // replica 0 takes every lease; the others learn the pods' numbers
		if x, ok := rep.index.(*redisindex.Index); ok {
			x.Renew()
		}
	}
	return p, nil
}

func (p *replicated) Pick(r *Request) int {
	i := p.next
	p.next = (p.next + 1) % len(p.reps)
	rep := p.reps[i]
	d, _, body := begin(rep.r, r, p.body) // never held: QueuePrefillsPerPod is 0
	p.body = body
	p.owner[r.ID], p.dec[r.ID] = int32(i), d
	return rep.byName[d.Pod]
}

// Started is the first response byte, where extproc calls Prefilled.
func (p *replicated) Started(r *Request) { p.dec[r.ID].Prefilled() }

// Finished is the end of the response stream, where extproc calls Done.
func (p *replicated) Finished(r *Request) {
	p.dec[r.ID].Done()
	p.dec[r.ID] = nil
}

// KVEvents applies a step's events to every replica's index, in order.
func (p *replicated) KVEvents(pod int, events []kvEvent) {
	p.batch = eachRun(events, p.batch, func(stored bool, hashes []uint64) {
		for _, rep := range p.reps {
			applyRun(rep.index, rep.pods[pod], stored, hashes)
		}
	})
}

// Scraped stores the metrics in every replica's fleet Load, and ticks
// the replicas' shared indexes when due.
func (p *replicated) Scraped(m []Metrics) {
	at := p.s.Clock()
	for _, rep := range p.reps {
		for i, x := range m {
			x.store(rep.fleet.Load(fmt.Sprintf("pod-%03d", i)), at)
		}
	}
	now, def := p.s.Now(), redisindex.DefaultConfig()
	tick, sync := now >= p.tickAt, now >= p.syncAt
	if tick {
		p.tickAt = now + (def.LeaseTTL / 3).Seconds()
	}
	if sync {
		p.syncAt = now + def.HomeSync.Seconds()
	}
	for _, rep := range p.reps {
		if x, ok := rep.index.(*redisindex.Index); ok {
			switch {
			case tick:
				x.Renew()
			case sync:
				x.SyncHomes()
			}
		}
	}
}
