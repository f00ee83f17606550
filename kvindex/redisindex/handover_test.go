package redisindex

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
)

// twoReplicas is replicas a and b over one server, with 600 ms leases, a
// the writer of both pods, both having heard p1 store blocks[:n].
func twoReplicas(t *testing.T, n int) (srv *redisserver.Server, a, b *replicaIndex) {
	t.Helper()
	srv = redisserver.New(t)
	a, b = newReplica(t, srv.Addr, "a", shortLease), newReplica(t, srv.Addr, "b", shortLease)
	a.tick()
	for _, r := range []*replicaIndex{a, b} {
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, blocks[:n]))
	}
	return srv, a, b
}

func shortLease(c *Config) { c.LeaseTTL = 600 * time.Millisecond }

// waitTakes ticks r until it writes pod's events.
func waitTakes(t *testing.T, r *replicaIndex, pod string) {
	t.Helper()
	waitFor(t, r.cfg.Replica+" takes "+pod, 10*time.Second, func() bool {
		r.tick()
		return r.pod(r.pods[pod]).held.Load()
	})
}

// TestLeaseContinuedByALateReplica: a replica started after a pod's blocks
// were stored (its view knows none of them) takes the pod's lease when its
// writer dies or stops, and the pod keeps every block Redis had; what the
// pod did while nobody wrote it (a block stored, one of the old blocks
// removed) is written by the new holder. Before continuing takes, the new
// holder started the pod afresh with its own view: 0 of the old blocks.
func TestLeaseContinuedByALateReplica(t *testing.T) {
	for _, stop := range []string{"killed", "stopped"} {
		t.Run(stop, func(t *testing.T) {
			srv := redisserver.New(t)
			a := newReplica(t, srv.Addr, "a", shortLease)
			a.tick()
			must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:4]))
			b := newReplica(t, srv.Addr, "b", shortLease) // started after the blocks: its view is empty
			b.tick()
			if got := b.match(blocks)["p1"].Blocks; got != 4 {
				t.Fatalf("before the handover: b matches %d blocks on p1, want 4", got)
			}
			// Both follow p1's next event; a writes it.
			gap := []uint64{0xa1, 0xa2, 0xa3}
			for _, r := range []*replicaIndex{a, b} {
				must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, gap[:1]))
			}
			switch stop {
			case "killed": // no release: the lease lapses
			case "stopped":
				a.releaseAll()
			}
			// While nobody writes p1 it stores two blocks and evicts one of
			// the old ones; only b hears it.
			must(t, b.Stored(b.pods["p1"], kvindex.TierGPU, gap[1:]))
			must(t, b.Removed(b.pods["p1"], kvindex.TierGPU, blocks[3:4]))
			waitTakes(t, b, "p1")
			if got := testutil.ToFloat64(b.metrics.taken.WithLabelValues("continued")); got < 1 {
				t.Errorf("leases taken continued = %v, want p1's", got)
			}
			fresh := newReplica(t, srv.Addr, "fresh", shortLease) // reads Redis alone
			for name, r := range map[string]*replicaIndex{"b": b, "fresh": fresh} {
				if got := r.match(blocks)["p1"].Blocks; got != 3 {
					t.Errorf("%s: after the handover p1 matches %d blocks, want the 3 stored before b started and not evicted", name, got)
				}
				if got := r.match(gap)["p1"].Blocks; got != 3 {
					t.Errorf("%s: p1 matches %d of the blocks stored around the handover, want 3", name, got)
				}
			}
			// The new holder writes the pod's events from here on.
			must(t, b.Removed(b.pods["p1"], kvindex.TierGPU, blocks[:1]))
			if got := fresh.match(blocks)["p1"].Blocks; got != 0 {
				t.Errorf("after b writes a removal: p1 matches %d blocks, want 0", got)
			}
		})
	}
}

// TestLeaseTakenFreshAfterAClear: a replica that saw the pod's cache
// cleared knows the pod as well as any writer, so its take starts the pod
// afresh with its view: nothing from before the clear survives, though its
// writer was dead when the clear came. A clear of entries alone (a gap its
// replay could not fill) does not make the view complete: the take then
// continues the pod.
func TestLeaseTakenFreshAfterAClear(t *testing.T) {
	srv, a, b := twoReplicas(t, 4)
	// a dies; p1 restarts (a clear) and stores one block; only b hears it.
	must(t, b.ClearPod(b.pods["p1"]))
	b.CacheCleared(b.pods["p1"])
	must(t, b.Stored(b.pods["p1"], kvindex.TierGPU, blocks[:1]))
	waitTakes(t, b, "p1")
	if got := testutil.ToFloat64(b.metrics.taken.WithLabelValues("fresh")); got < 1 {
		t.Errorf("leases taken fresh = %v, want p1's", got)
	}
	if got := a.match(blocks)["p1"].Blocks; got != 1 {
		t.Errorf("after the take: p1 matches %d blocks, want the 1 stored since the clear", got)
	}

	c := newReplica(t, srv.Addr, "c", shortLease).seasoned()
	must(t, c.ClearPod(c.pods["p2"])) // entries only: c's view of p2 is incomplete
	waitTakes(t, c, "p2")
	v, err := c.rdb.HGet(context.Background(), c.podsKey(nsTag("m")), "p2").Result()
	must(t, err)
	if e, ok := parsePodEntry(v); !ok || e.base == e.epoch {
		t.Errorf("p2's entry after c's take = %q, want a continued one (its base below its epoch)", v)
	}
}

// TestPausedWriterStopsWriting: a writer whose lease lapsed while it was
// paused writes nothing more, so the replica that continued the pod
// meanwhile is not written over (its records would count: continuing keeps
// the old holder's epoch counting); its next lease tick finds the lease
// another's.
func TestPausedWriterStopsWriting(t *testing.T) {
	_, a, b := twoReplicas(t, 2)
	waitTakes(t, b, "p1") // a is paused: no tick
	// a wakes up and applies p1's next events before its lease tick: the
	// store twice, as a and b both hear it.
	for _, r := range []*replicaIndex{a, b} {
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, blocks[2:3]))
	}
	if a.pod(a.pods["p1"]).held.Load() {
		t.Error("a still writes p1 with its lease lapsed")
	}
	if got := testutil.ToFloat64(a.metrics.lapsed); got != 1 {
		t.Errorf("leases_lapsed_total of a = %v, want 1", got)
	}
	must(t, b.Removed(b.pods["p1"], kvindex.TierGPU, blocks[2:3]))
	if got := b.match(blocks)["p1"].Blocks; got != 2 {
		t.Errorf("p1 matches %d blocks, want 2: a's late store must not outlive b's removal", got)
	}
	a.tick()
	if a.pod(a.pods["p1"]).held.Load() {
		t.Error("a took p1 back from b")
	}
}

func TestParsePodEntry(t *testing.T) {
	for in, want := range map[string]podEntry{
		"3:9":          {num: 3, epoch: 9, base: 9},
		"3:9:4":        {num: 3, epoch: 9, version: 4, base: 9},
		"3:9:4:2":      {num: 3, epoch: 9, version: 4, base: 2},
		"3:9:4:9":      {num: 3, epoch: 9, version: 4, base: 9},
		"3:9:4:10":     {}, // a base past the epoch
		"3:9:4:0":      {},
		"3:9:4:2:1":    {},
		"0:9":          {},
		"3:0":          {},
		"3":            {},
		"3:9:x":        {},
		"4294967296:9": {},
	} {
		got, ok := parsePodEntry(in)
		if got != want || ok != (want != podEntry{}) {
			t.Errorf("parsePodEntry(%q) = %+v, %v; want %+v", in, got, ok, want)
		}
	}
}

// TestRollingRestart replaces every replica in turn, each new one started
// (with an empty view) while its predecessor still runs, then the old one
// stopped once the new one has followed the pods for a lease's life, as a
// rolling update does, while the pods store and evict blocks all along.
// Afterwards Redis holds exactly each pod's blocks. (Before continuing
// takes, each new holder started the pods afresh with its own view.)
func TestRollingRestart(t *testing.T) {
	srv := redisserver.New(t)
	type running struct {
		r    *replicaIndex
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(name string) *running {
		r := newReplica(t, srv.Addr, name, shortLease)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		return &running{r, cancel, done}
	}
	var mu sync.Mutex // guards live and the pods' true holdings
	live := []*running{start("r0"), start("r1")}
	var stopped []*running
	held := map[string]map[uint64]bool{"p1": {}, "p2": {}}
	rng := rand.New(rand.NewPCG(1, 2))
	event := func() {
		mu.Lock()
		defer mu.Unlock()
		pod := []string{"p1", "p2"}[rng.IntN(2)]
		h := uint64(rng.IntN(64) + 1)
		store := !held[pod][h]
		held[pod][h] = store
		for _, x := range live {
			if store {
				must(t, x.r.Stored(x.r.pods[pod], kvindex.TierGPU, []uint64{h}))
			} else {
				must(t, x.r.Removed(x.r.pods[pod], kvindex.TierGPU, []uint64{h}))
			}
		}
	}
	for range 200 {
		event()
	}
	for gen := 2; gen < 6; gen++ {
		next := start(fmt.Sprintf("r%d", gen))
		mu.Lock()
		live = append(live, next)
		mu.Unlock()
		// The old replica stops once the new one is ready to take its pods
		// (mayTake), as a rolling update waits for a new pod to be ready.
		for begin := time.Now(); time.Since(begin) < 800*time.Millisecond; {
			event()
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		old := live[0]
		live = live[1:]
		mu.Unlock()
		stopped = append(stopped, old)
		old.stop() // SIGTERM: it writes what it queued and releases its leases
		<-old.done
		for range 50 {
			event()
			time.Sleep(time.Millisecond)
		}
	}
	for _, x := range live {
		must(t, x.r.Flush())
	}
	lapsed := 0.0
	for _, x := range append(stopped, live...) {
		lapsed += testutil.ToFloat64(x.r.metrics.lapsed)
	}
	t.Logf("leases lapsed: %v", lapsed)
	check := newReplica(t, srv.Addr, "check", shortLease) // reads Redis alone
	waitFor(t, "the live replicas hold every lease", 10*time.Second, func() bool {
		n := 0
		for _, x := range live {
			n += int(testutil.ToFloat64(x.r.metrics.leases))
		}
		return n == 2
	})
	for _, x := range live {
		must(t, x.r.Flush())
	}
	for pod, blocks := range held {
		for h := uint64(1); h <= 64; h++ {
			if got := check.match([]uint64{h})[pod].Blocks; (got == 1) != blocks[h] {
				t.Errorf("%s, block %d: matched %d, want held %v", pod, h, got, blocks[h])
			}
		}
	}
	for _, x := range live {
		x.stop()
		<-x.done
	}
}

// seasoned makes the replica one that has followed its pods for a lease's
// life, so that its next lease tick may take a free lease (mayTake).
func (r *replicaIndex) seasoned() *replicaIndex {
	r.Index.pods.Lock()
	defer r.Index.pods.Unlock()
	for _, ps := range r.Index.pods.byID {
		ps.since = ps.since.Add(-r.cfg.LeaseTTL)
	}
	return r
}

// TestPodCounts: a pod's count per tier in a block's value, as a match
// counts it: a summary naming it is a GPU store while its version allows,
// its real records count from its base to its epoch.
func TestPodCounts(t *testing.T) {
	rec := func(num uint32, tier kvindex.Tier, delta int8, v uint64) []byte {
		return appendRecord(nil, num, uint8(tier), delta, v)
	}
	val := slices.Concat(summaryOf(100, []uint32{1, 3}), rec(1, kvindex.TierCPU, 1, 4), rec(1, kvindex.TierGPU, 1, 5),
		rec(3, kvindex.TierGPU, -1, 9), rec(1, kvindex.TierCPU, 1, 2), rec(1, kvindex.TierGPU, -1, 6))
	for _, tc := range []struct {
		e    podEntry
		want [kvindex.NumTiers]int
	}{
		{podEntry{num: 1, epoch: 5, base: 4, version: 50}, [kvindex.NumTiers]int{2, 1}},  // the summary, a store; CPU from epoch 4
		{podEntry{num: 1, epoch: 6, base: 5, version: 50}, [kvindex.NumTiers]int{1, 0}},  // up to epoch 6: the removal; CPU before the base
		{podEntry{num: 1, epoch: 5, base: 2, version: 150}, [kvindex.NumTiers]int{1, 2}}, // cleared since the summary: not its member
		{podEntry{num: 2, epoch: 5, base: 1, version: 0}, [kvindex.NumTiers]int{}},
	} {
		if got := podCounts(val, tc.e); got != tc.want {
			t.Errorf("podCounts(%+v) = %v, want %v", tc.e, got, tc.want)
		}
	}
}
