package redisindex

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
)

// replicaIndex is one router replica's index over the shared server.
type replicaIndex struct {
	*Index
	pods map[string]kvindex.PodID
}

// testIndex is an index over the server at addr with a local view of
// kvindex's defaults, Config's defaults (but a 10 s round-trip timeout: a
// loaded machine must not mark Redis down, and the outages here stop the
// server) changed by mutate (nil: none), metrics in reg (nil: none),
// closed when the test ends.
func testIndex(tb testing.TB, addr string, reg prometheus.Registerer, mutate func(*Config)) *Index {
	tb.Helper()
	kcfg := kvindex.DefaultConfig()
	local, err := kvindex.New(kcfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addrs, cfg.Timeout = []string{addr}, 10*time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	x, err := New(cfg, local, kcfg, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = x.close() })
	return x
}

func newReplica(t *testing.T, addr, name string, mutate func(*Config)) *replicaIndex {
	t.Helper()
	x := testIndex(t, addr, prometheus.NewRegistry(), func(cfg *Config) {
		cfg.Replica, cfg.Prefix = name, "test:"
		if mutate != nil {
			mutate(cfg)
		}
	})
	r := &replicaIndex{Index: x, pods: map[string]kvindex.PodID{}}
	for _, p := range []string{"p1", "p2"} {
		r.pods[p] = x.AddPod(p, "m")
	}
	return r
}

// renewDue renews x's leases as Run does, once LeaseTTL/3 has passed
// since *last. Leases run on the real clock, not a test's: a test that drives
// an index without Run for seconds (hundreds of writes under -race on a
// busy host) would otherwise find them lapsed, and its writes would stop
// reaching Redis.
func renewDue(x *Index, last *time.Time) {
	if time.Since(*last) > x.cfg.LeaseTTL/3 {
		x.tick()
		*last = time.Now()
	}
}

// match is Match over both pods, by pod name.
func (r *replicaIndex) match(hashes []uint64) map[string]kvindex.PodMatch {
	ids := []kvindex.PodID{r.pods["p1"], r.pods["p2"]}
	ms := r.Match("m", hashes, ids, nil)
	return map[string]kvindex.PodMatch{"p1": ms[0], "p2": ms[1]}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var blocks = []uint64{0x1111, 0x2222, 0x3333, 0x4444, 0x5555, 0x6666}

// waitFor polls cond, for the state another goroutine or Redis's clock
// moves.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReplicasShareEntriesAndSpeculation(t *testing.T) {
	srv := redisserver.New(t)
	a, b := newReplica(t, srv.Addr, "a", nil), newReplica(t, srv.Addr, "b", nil)
	a.tick() // a takes both leases
	b.tick()
	if got := testutil.ToFloat64(a.metrics.leases); got != 2 {
		t.Fatalf("leases of a = %v, want 2", got)
	}
	if got := testutil.ToFloat64(b.metrics.leases); got != 0 {
		t.Fatalf("leases of b = %v, want 0", got)
	}
	// Both follow p1's events; only a writes them.
	for _, r := range []*replicaIndex{a, b} {
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, blocks[:4]))
		must(t, r.Stored(r.pods["p1"], kvindex.TierCPU, blocks[:2]))
		must(t, r.Removed(r.pods["p1"], kvindex.TierGPU, blocks[3:4]))
	}
	// b decides a request for p2: a sees its speculation.
	must(t, b.Speculate(b.pods["p2"], blocks))
	fresh := newReplica(t, srv.Addr, "fresh", nil) // a warm start: nothing local
	for name, r := range map[string]*replicaIndex{"a": a, "b": b, "fresh": fresh} {
		got := r.match(blocks)
		want1 := kvindex.PodMatch{Pod: r.pods["p1"], Blocks: 3, Tiers: [kvindex.NumTiers]int{3, 0, 0, 0}}
		want2 := kvindex.PodMatch{Pod: r.pods["p2"], Blocks: 6, Speculative: 6}
		if got["p1"] != want1 || got["p2"] != want2 {
			t.Errorf("%s: Match = %+v, want %+v and %+v", name, got, want1, want2)
		}
	}
	// Settled speculation lapses after the grace period for every replica.
	must(t, b.Settle(b.pods["p2"], blocks))
	waitFor(t, "settled speculation lapses", 10*time.Second, func() bool {
		return a.match(blocks)["p2"].Blocks == 0
	})
	// A clear event written by the lease holder empties p1 for everyone.
	must(t, a.ClearPod(a.pods["p1"]))
	if got := fresh.match(blocks)["p1"]; got.Blocks != 0 {
		t.Errorf("after ClearPod: Match(p1) = %+v, want no blocks", got)
	}
}

func TestLeaseTakenOverWhenWriterDies(t *testing.T) {
	srv := redisserver.New(t)
	short := func(c *Config) { c.LeaseTTL = 600 * time.Millisecond }
	a, b := newReplica(t, srv.Addr, "a", short), newReplica(t, srv.Addr, "b", short)
	a.tick()
	for _, r := range []*replicaIndex{a, b} {
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, blocks[:4]))
	}
	// a dies (no more renewals) before writing p1's next event, which b
	// applies to its local view only.
	must(t, b.Removed(b.pods["p1"], kvindex.TierGPU, blocks[2:4]))
	if got := b.match(blocks)["p1"].Blocks; got != 4 {
		t.Fatalf("before the takeover: Match(p1) = %d blocks, want the 4 a wrote", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	start := time.Now()
	// The leases gauge is set once a tick has taken (and cleared) both.
	waitFor(t, "b takes both leases", 20*time.Second, func() bool { return testutil.ToFloat64(b.metrics.leases) == 2 })
	t.Logf("taken over %v after the writer's last renewal", time.Since(start))
	if got := testutil.ToFloat64(b.metrics.taken.WithLabelValues("continued")); got != 2 {
		t.Errorf("leases taken continued by b = %v, want one per pod (2)", got)
	}
	if got := testutil.ToFloat64(b.metrics.clears); got != 0 {
		t.Errorf("clears counted by b = %v, want none: a continuing take clears nothing", got)
	}
	if got := a.match(blocks)["p1"]; got.Blocks != 2 {
		t.Errorf("after the takeover: Match(p1) = %+v, want 2 blocks: b writes the removal a had not", got)
	}
	must(t, b.Stored(b.pods["p1"], kvindex.TierGPU, blocks[2:3]))
	must(t, b.Flush()) // with Run running, an event does not wait for Redis
	if got := a.match(blocks)["p1"].Blocks; got != 3 {
		t.Errorf("b writes p1's events: Match(p1) = %d blocks, want 3", got)
	}
}

func TestRedisRestartedEmptyIsRebuilt(t *testing.T) {
	srv := redisserver.New(t)
	a, b := newReplica(t, srv.Addr, "a", nil), newReplica(t, srv.Addr, "b", nil)
	a.tick()
	for _, r := range []*replicaIndex{a, b} { // both follow p1; a writes
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, blocks[:5]))
		must(t, r.ClearPod(r.pods["p1"]))
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, blocks[:3]))
	}
	clears := testutil.ToFloat64(a.metrics.clears) + testutil.ToFloat64(b.metrics.clears)
	srv.Stop()
	srv.Start() // its data is gone, leases and epochs with it
	for _, r := range []*replicaIndex{a, b} {
		if got := r.match(blocks)["p1"]; got.Blocks > 3 {
			t.Fatalf("after the restart: Match(p1) = %+v, want nothing served beyond the 3 held", got)
		}
	}
	// The first to renew finds the leases gone, takes them and copies its
	// view in: entries rebuilt, pods cleared (counted).
	b.tick()
	a.tick()
	if got := testutil.ToFloat64(a.metrics.clears) + testutil.ToFloat64(b.metrics.clears); got <= clears {
		t.Errorf("clears after the restart = %v, want more than %v", got, clears)
	}
	for name, r := range map[string]*replicaIndex{"a": a, "b": b} {
		if got := r.match(blocks)["p1"].Blocks; got != 3 {
			t.Errorf("%s: rebuilt Match(p1) = %d blocks, want 3", name, got)
		}
	}
}

func TestRedisUnreachableUnderLoad(t *testing.T) {
	srv := redisserver.New(t)
	quick := func(c *Config) { c.PingInterval = 100 * time.Millisecond; c.LeaseTTL = 900 * time.Millisecond }
	a := newReplica(t, srv.Addr, "a", quick)
	a.tick()
	must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:4]))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	srv.Stop()
	outage := 10 * time.Second
	if testing.Short() {
		outage = 2 * time.Second
	}
	end := time.Now().Add(outage)
	n := 0
	for time.Now().Before(end) {
		// Events keep coming while Redis is away; the local view has them.
		if n == 10 {
			must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[4:5]))
		}
		got := a.match(blocks)["p1"].Blocks
		want := 4
		if n >= 10 {
			want = 5
		}
		if got != want && n > 0 { // the first match meets the outage
			t.Fatalf("match %d during the outage: Match(p1) = %d blocks, want %d from the local view", n, got, want)
		}
		n++
		time.Sleep(5 * time.Millisecond)
	}
	if up, since := a.Up(); up || since.IsZero() {
		t.Errorf("during the outage: Up() = %v, %v, want down with a time", up, since)
	}
	if got := testutil.ToFloat64(a.metrics.up); got != 0 {
		t.Errorf("kvrouter_index_redis_up = %v during the outage, want 0", got)
	}
	if got := testutil.ToFloat64(a.metrics.localMatches); got < float64(n-1) {
		t.Errorf("local matches = %v, want at least %d", got, n-1)
	}
	srv.Start() // empty: the recovered lease copies the local view in
	waitFor(t, "Redis marked up and the lease re-taken", 20*time.Second, func() bool {
		up, _ := a.Up()
		return up && a.pod(a.pods["p1"]).held.Load()
	})
	local := testutil.ToFloat64(a.metrics.localMatches)
	if got := a.match(blocks)["p1"].Blocks; got != 5 {
		t.Errorf("after recovery: Match(p1) = %d blocks, want 5", got)
	}
	if got := testutil.ToFloat64(a.metrics.localMatches); got != local {
		t.Errorf("after recovery the match read the local view (local matches %v → %v)", local, got)
	}
}

// TestQueuedEventsWritten: with Run running, an event does not wait for
// Redis. Events queue while Redis holds the writer's pipelines (CLIENT
// PAUSE, lifted by the test once they have), and are all written before
// Run returns; an event whose write fails
// marks Redis down and is counted, and the lease taken again once Redis
// is back copies it in from the local view.
func TestQueuedEventsWritten(t *testing.T) {
	srv := redisserver.New(t)
	quick := func(c *Config) { c.PingInterval = 100 * time.Millisecond }
	// a's round trips outlast the pause, which the test lifts itself.
	a := newReplica(t, srv.Addr, "a", func(c *Config) { quick(c); c.Timeout = 60 * time.Second })
	ids := []kvindex.PodID{a.pods["p1"], a.pods["p2"]}
	for i := range 6 {
		ids = append(ids, a.AddPod(fmt.Sprintf("q%d", i), "m"))
	}
	a.tick()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = a.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	waitFor(t, "the group writer", 20*time.Second, a.grouping.Load)

	must(t, a.rdb.Do(context.Background(), "CLIENT", "PAUSE", "30000", "WRITE").Err())
	chain := make([]uint64, 100)
	for i := range chain {
		chain[i] = uint64(0xc0de00 + i)
	}
	var apply sync.WaitGroup
	for k, id := range ids {
		apply.Add(1)
		go func() { // 100 events a pod, each a store or a removal of blocks it stored
			defer apply.Done()
			for i := range chain {
				var err error
				if i%5 == 4 {
					err = a.Removed(id, kvindex.TierGPU, chain[i-k%4:i])
				} else {
					err = a.Stored(id, kvindex.TierGPU, chain[:i+1])
				}
				if err != nil { // not must: t.Fatal ends only the test's goroutine
					t.Error(err)
					return
				}
			}
		}()
	}
	// The queue holds 512; past that the appliers wait for the pause's end.
	waitFor(t, "100 of the 800 events queued with Redis paused (two pipelines of at most 256 in flight)", 20*time.Second, func() bool {
		return len(a.appends) >= 100
	})
	must(t, a.rdb.Do(context.Background(), "CLIENT", "UNPAUSE").Err())
	apply.Wait()
	cancel()
	<-ran
	if up, _ := a.Up(); !up { // a compaction cut off is no outage
		t.Fatal("Run's end marked Redis down")
	}
	reader := newReplica(t, srv.Addr, "reader", nil)
	cands := make([]kvindex.PodID, len(ids))
	for i, id := range ids {
		cands[i] = reader.AddPod(a.local.PodName(id), "m")
	}
	if got, want := reader.Match("m", chain, cands, nil), a.local.Match("m", chain, ids, nil); !slices.EqualFunc(got, want, func(g, w kvindex.PodMatch) bool {
		return g.Blocks == w.Blocks && g.Tiers == w.Tiers
	}) {
		t.Fatalf("after Run ended: Match through Redis = %+v, want the writer's local view %+v", got, want)
	}

	// A write that fails after the event was queued. (No TTL: Run's
	// bound check, after its first lease tick, finds no maxmemory, so
	// nothing else Run does meets the outage first.)
	b := newReplica(t, srv.Addr, "b", func(c *Config) { quick(c); c.TTL = 0 })
	b.seasoned().tick()
	if !b.pod(b.pods["p1"]).held.Load() {
		t.Fatal("b did not take p1's lease: a's Run did not release it as it ended")
	}
	ctx, cancel = context.WithCancel(context.Background())
	ran = make(chan struct{})
	go func() { defer close(ran); _ = b.Run(ctx) }()
	waitFor(t, "the group writer and the bound check", 20*time.Second, func() bool { return b.grouping.Load() && b.Unbounded() })
	srv.Stop()
	must(t, b.Stored(b.pods["p1"], kvindex.TierGPU, blocks[:3]))
	waitFor(t, "Redis marked down by the failed write", 20*time.Second, func() bool { up, _ := b.Up(); return !up })
	if got := testutil.ToFloat64(b.metrics.errors.WithLabelValues("events")); got != 1 {
		t.Errorf("events errors = %v, want 1", got)
	}
	if err := b.Flush(); err == nil {
		t.Error("Flush with Redis stopped: no error")
	}
	srv.Start()
	waitFor(t, "Redis marked up and the lease re-taken", 20*time.Second, func() bool {
		up, _ := b.Up()
		return up && b.pod(b.pods["p1"]).held.Load()
	})
	if got := b.match(blocks)["p1"].Blocks; got != 3 {
		t.Errorf("after recovery: Match(p1) = %d blocks, want the 3 the failed write had", got)
	}
	cancel()
	<-ran
}

// TestResponsesShared: a response id one replica learned is found by
// another, with the pod that produced it; an unknown id is not.
func TestResponsesShared(t *testing.T) {
	srv := redisserver.New(t)
	a, b := newReplica(t, srv.Addr, "a", nil), newReplica(t, srv.Addr, "b", nil)
	a.ShareResponse("resp_1", "p2")
	waitFor(t, "the shared response id", 10*time.Second, func() bool {
		pod, ok := b.SharedResponse("resp_1")
		return ok && pod == "p2"
	})
	if pod, ok := b.SharedResponse("resp_2"); ok {
		t.Errorf("unknown id: SharedResponse = %q, want none", pod)
	}
	if ttl := a.rdb.TTL(t.Context(), "test:resp:resp_1").Val(); ttl <= 0 {
		t.Errorf("TTL of a shared id = %v, want one", ttl)
	}
}
