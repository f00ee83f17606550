package redisindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
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
	if got := testutil.ToFloat64(b.metrics.clears); got < 2 {
		t.Errorf("clears counted by b = %v, want one per pod taken (2)", got)
	}
	if got := a.match(blocks)["p1"]; got.Blocks != 2 {
		t.Errorf("after the takeover: Match(p1) = %+v, want b's 2 blocks and not a's stale 4", got)
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
	b.tick()
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

func TestHostileValuesRefused(t *testing.T) {
	// Standalone, matches and appends go through the raw connections; the
	// cluster's path, go-redis, must refuse the same values the same way.
	for _, path := range []string{"raw", "go-redis"} {
		t.Run(path, func(t *testing.T) { testHostileValuesRefused(t, path == "go-redis") })
	}
}

func testHostileValuesRefused(t *testing.T, goRedis bool) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", func(c *Config) { c.MaxHolders = 8 })
	if a.raw == nil {
		t.Fatal("a standalone index has no raw pool")
	}
	if goRedis {
		a.raw.close()
		a.raw = nil
	}
	a.tick()
	must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	key := func(h uint64) string { return string(a.blockKey(nil, nsTag("m"), h)) }
	tests := []struct {
		name   string
		poison func() error
		reason string
		want   int // blocks of p1 still matched
	}{
		{"wrong type", func() error {
			if err := rdb.Del(ctx, key(blocks[3])).Err(); err != nil {
				return err
			}
			if err := rdb.RPush(ctx, key(blocks[3]), "garbage").Err(); err != nil {
				return err
			}
			return a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[3:4]) // the writer meets it
		}, "type", 3},
		{"not whole records", func() error { return rdb.Set(ctx, key(blocks[2]), "garbage", 0).Err() }, "size", 2},
		{"a record of no known kind", func() error {
			rec := appendRecord(nil, a.pod(a.pods["p1"]).num.Load(), 9, 1, 1)
			return rdb.Set(ctx, key(blocks[1]), rec, 0).Err()
		}, "record", 1},
		{"over the holder bound", func() error {
			var val []byte
			for i := range 9 {
				val = appendRecord(val, uint32(100+i), kindSpec, 0, 1<<62)
			}
			return rdb.Append(ctx, key(blocks[0]), string(val)).Err()
		}, "holders", 0},
		{"a garbage pod table entry", func() error { return rdb.HSet(ctx, a.podsKey(nsTag("m")), "p1", "x:y").Err() }, "pods", 0},
		{"a pod number out of range", func() error {
			return rdb.HSet(ctx, a.podsKey(nsTag("m")), "p1", "4294967296:1").Err()
		}, "pods", 0},
		{"a pod table entry too long", func() error {
			return rdb.HSet(ctx, a.podsKey(nsTag("m")), "p1", "1:"+strings.Repeat("1", 100)).Err()
		}, "pods", 0},
		{"a pod table of the wrong type", func() error {
			if err := rdb.Del(ctx, a.podsKey(nsTag("m"))).Err(); err != nil {
				return err
			}
			return rdb.Set(ctx, a.podsKey(nsTag("m")), "x", 0).Err()
		}, "pods", 0},
	}
	for _, tt := range tests {
		before := testutil.ToFloat64(a.metrics.refused.WithLabelValues(tt.reason))
		must(t, tt.poison())
		got := a.match(blocks)
		if got["p1"].Blocks != tt.want || got["p2"].Blocks != 0 {
			t.Errorf("%s: Match = %+v, want p1 %d blocks, p2 none", tt.name, got, tt.want)
		}
		if after := testutil.ToFloat64(a.metrics.refused.WithLabelValues(tt.reason)); after <= before {
			t.Errorf("%s: refused{reason=%q} = %v, want more than %v", tt.name, tt.reason, after, before)
		}
	}
	if up, _ := a.Up(); !up {
		t.Error("hostile values marked Redis down; they are refused, not failures")
	}
}

// TestCluster: on a Redis Cluster the replicas share entries and
// speculation as on one server; a namespace's keys spread over several
// nodes, and a match reads them in one pipeline per node.
func TestCluster(t *testing.T) {
	nodes := redisserver.NewCluster(t, 3)
	cluster := func(c *Config) {
		c.Addrs, c.Cluster, c.Groups = []string{nodes[0].Addr, nodes[1].Addr}, true, 16
	}
	a, b := newReplica(t, nodes[0].Addr, "a", cluster), newReplica(t, nodes[0].Addr, "b", cluster)
	a.tick()
	b.tick()
	if got := testutil.ToFloat64(a.metrics.leases); got != 2 {
		t.Fatalf("leases of a = %v, want 2", got)
	}
	many := make([]uint64, 64) // over all 16 groups
	for i := range many {
		many[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	for _, r := range []*replicaIndex{a, b} {
		must(t, r.Stored(r.pods["p1"], kvindex.TierGPU, many[:40]))
	}
	must(t, b.Speculate(b.pods["p2"], many))
	for name, r := range map[string]*replicaIndex{"a": a, "b": b} {
		got := r.match(many)
		if got["p1"].Blocks != 40 || got["p1"].Tiers[kvindex.TierGPU] != 40 || got["p2"].Speculative != 64 {
			t.Errorf("%s: Match = %+v, want p1 40 real blocks and p2 64 speculative", name, got)
		}
	}
	// The load table, in the pod table's slot, is read in the same round
	// trip.
	a.Charge(a.pods["p2"], 900, 3)
	if _, peers := b.MatchLoad("m", many, []kvindex.PodID{b.pods["p1"], b.pods["p2"]}, nil, nil); peers[1] != (replica.PodLoad{PrefillTokens: 900, Prefilling: 3}) || peers[0] != (replica.PodLoad{}) {
		t.Errorf("b sees the load %+v, want a's 900 tokens in 3 requests on p2", peers)
	}
	// The homes' table and stream, in the pod table's slot too: a home
	// and a tail of a's reach b, through the stream and the table.
	ha, hb := &fakeHomes{}, &fakeHomes{}
	a.ShareHomes(ha)
	b.ShareHomes(hb)
	until := time.Now().Add(time.Minute).UnixMilli() * int64(time.Millisecond)
	ha.changed = []replica.Home{{Namespace: "m", Block: 7, Pod: a.pods["p2"], Tokens: 300, Until: until}}
	ha.grown = []replica.HomeTail{{Namespace: "m", Block: 7, Blocks: 17, BlockSize: 16, Signature: []uint64{1, 2}}}
	a.SyncHomes()
	b.SyncHomes()
	wantHome := []replica.Home{{Namespace: "m", Block: 7, Pod: b.pods["p2"], Tokens: 300, Until: until}}
	if !reflect.DeepEqual(hb.adopted, wantHome) || len(hb.tails) != 1 || hb.tails[0].Blocks != 17 {
		t.Errorf("on the cluster b adopted %+v and tails %+v, want a's home of prefix 7 on p2 and its tail", hb.adopted, hb.tails)
	}
	b.tick()
	if !reflect.DeepEqual(hb.adopted, wantHome) {
		t.Errorf("on the cluster b's lease tick adopted %+v from the table, want a's home of prefix 7 on p2", hb.adopted)
	}
	// The keys really are on several nodes.
	holding := 0
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		keys, err := rdb.DBSize(context.Background()).Result()
		_ = rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
		if keys > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Errorf("the index's keys are on %d of 3 nodes, want them spread", holding)
	}
	if up, _ := a.Up(); !up {
		t.Error("Redis marked down on the cluster")
	}

	// Without TTLs the bound is every master's: one master without it is
	// unbounded.
	c := newReplica(t, nodes[0].Addr, "c", func(cfg *Config) { cluster(cfg); cfg.TTL = 0 })
	setBound := func(n *redisserver.Server, maxmemory string) {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		defer func() { _ = rdb.Close() }()
		must(t, rdb.ConfigSet(context.Background(), "maxmemory", maxmemory).Err())
		must(t, rdb.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lfu").Err())
	}
	if c.checkBound() || !c.Unbounded() {
		t.Error("no master has maxmemory: checkBound = true, want the keys reported unbounded")
	}
	for _, n := range nodes[:2] {
		setBound(n, "64mb")
	}
	if c.checkBound() || !c.Unbounded() {
		t.Error("one master of three lacks maxmemory: checkBound = true, want the keys reported unbounded")
	}
	setBound(nodes[2], "64mb")
	if !c.checkBound() || c.Unbounded() {
		t.Error("every master bounded: checkBound = false, want the keys bounded")
	}
}

// TestNoLocalView: without a local view the replica's memory holds no
// entries, Redis still shares them, and while Redis is down matches find
// nothing (load routing) instead of failing.
func TestNoLocalView(t *testing.T) {
	srv := redisserver.New(t)
	lean := func(c *Config) { c.NoLocalView = true }
	a, b := newReplica(t, srv.Addr, "a", lean), newReplica(t, srv.Addr, "b", nil)
	a.tick()
	b.tick()
	must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:3]))
	if n, _ := a.local.Len(); n != 0 {
		t.Errorf("the local view holds %d entries, want none", n)
	}
	for name, r := range map[string]*replicaIndex{"a": a, "b": b} {
		if got := r.match(blocks)["p1"].Blocks; got != 3 {
			t.Errorf("%s: Match(p1) = %d blocks, want 3 through Redis", name, got)
		}
	}
	if err := a.Stored(kvindex.PodID(12345), kvindex.TierGPU, blocks); !errors.Is(err, kvindex.ErrUnknownPod) {
		t.Errorf("Stored(unknown pod) = %v, want ErrUnknownPod", err)
	}
	srv.Stop()
	if got := a.match(blocks)["p1"].Blocks; got != 0 {
		t.Errorf("with Redis down: Match(p1) = %d blocks, want none (load routing)", got)
	}
	if up, _ := a.Up(); up {
		t.Error("Redis not marked down")
	}
}

// TestSharedLoad: a replica's charges reach the other replicas' matches,
// not its own; they lapse at their deadline unless renewed, and a load
// table of the wrong shape is refused and counted, never a failure.
func TestSharedLoad(t *testing.T) {
	for _, path := range []string{"raw", "go-redis"} {
		t.Run(path, func(t *testing.T) { testSharedLoad(t, path == "go-redis") })
	}
}

func testSharedLoad(t *testing.T, goRedis bool) {
	srv := redisserver.New(t)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func(c *Config) {
		c.LeaseTTL = time.Second
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	}
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	a, b := newReplica(t, srv.Addr, "a", clock), newReplica(t, srv.Addr, "b", clock)
	if goRedis {
		for _, r := range []*replicaIndex{a, b} {
			r.raw.close()
			r.raw = nil
		}
	}
	a.tick()
	b.tick()
	ids := func(r *replicaIndex) []kvindex.PodID { return []kvindex.PodID{r.pods["p1"], r.pods["p2"]} }
	load := func(r *replicaIndex) []replica.PodLoad {
		_, peers := r.MatchLoad("m", blocks, ids(r), nil, nil)
		return peers
	}
	a.Charge(a.pods["p1"], 1000, 1)
	a.Charge(a.pods["p1"], 500, 1)
	b.Charge(b.pods["p2"], 70, 1)
	if got := load(b); got[0] != (replica.PodLoad{PrefillTokens: 1500, Prefilling: 2}) || got[1] != (replica.PodLoad{}) {
		t.Errorf("b sees %+v, want a's 1500 tokens in 2 requests on p1, nothing of its own on p2", got)
	}
	if got := load(a); got[0] != (replica.PodLoad{}) || got[1] != (replica.PodLoad{PrefillTokens: 70, Prefilling: 1}) {
		t.Errorf("a sees %+v, want b's 70 tokens on p2 only", got)
	}
	a.Charge(a.pods["p1"], -1000, -1)
	if got := load(b)[0]; got != (replica.PodLoad{PrefillTokens: 500, Prefilling: 1}) {
		t.Errorf("after a's first prefill b sees %+v on p1, want 500 tokens in 1 request", got)
	}
	// Unchanged, a's field lapses after twice the lease TTL; the lease
	// tick renews it.
	advance(1500 * time.Millisecond)
	a.tick()
	advance(1500 * time.Millisecond)
	if got := load(b)[0]; got.Prefilling != 1 {
		t.Errorf("renewed by a's tick, b sees %+v on p1, want a's request", got)
	}
	advance(2500 * time.Millisecond)
	if got := load(b)[0]; got != (replica.PodLoad{}) {
		t.Errorf("past its deadline b sees %+v on p1, want nothing", got)
	}
	a.Charge(a.pods["p1"], -500, -1)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	if n, err := rdb.HLen(ctx, a.loadKey(nsTag("m"))).Result(); err != nil || n != 1 {
		t.Errorf("load table fields = %d, %v; want only b's (a's at zero deleted)", n, err)
	}

	refused := func() float64 { return testutil.ToFloat64(b.metrics.refused.WithLabelValues("load")) }
	before := refused()
	must(t, rdb.HSet(ctx, a.loadKey(nsTag("m")), "p1|c", "lots", "p1", "1:1:99999999999999", "p2|d", "1:2:3:4").Err())
	if got := load(b); got[0] != (replica.PodLoad{}) || got[1] != (replica.PodLoad{}) {
		t.Errorf("garbage fields: b sees %+v, want nothing", got)
	}
	if after := refused(); after < before+3 {
		t.Errorf("refused{reason=load} = %v, want at least %v", after, before+3)
	}
	must(t, rdb.Del(ctx, a.loadKey(nsTag("m"))).Err())
	must(t, rdb.Set(ctx, a.loadKey(nsTag("m")), "x", 0).Err())
	before = refused()
	if got := b.match(blocks)["p1"].Blocks; got != 0 {
		t.Errorf("a load table of the wrong type: Match = %d blocks, want 0 (nothing stored)", got)
	}
	if got := load(b); got[0] != (replica.PodLoad{}) {
		t.Errorf("a load table of the wrong type: b sees %+v, want nothing", got)
	}
	if refused() <= before {
		t.Error("a load table of the wrong type was not refused")
	}
	if up, _ := b.Up(); !up {
		t.Error("a hostile load table marked Redis down")
	}
}

// TestBlockKeysKeepATTL: a key refreshed recently is not refreshed again
// by each append, but a key an append creates always gets its TTL, even
// when this replica refreshed the key's previous incarnation a moment ago.
func TestBlockKeysKeepATTL(t *testing.T) {
	for _, path := range []string{"raw", "go-redis"} {
		t.Run(path, func(t *testing.T) {
			srv := redisserver.New(t)
			a := newReplica(t, srv.Addr, "a", func(c *Config) { c.TTL = time.Hour })
			if path == "go-redis" {
				a.raw.close()
				a.raw = nil
			}
			a.tick()
			ctx := context.Background()
			key := string(a.blockKey(nil, nsTag("m"), blocks[0]))
			ttl := func() time.Duration {
				d, err := a.rdb.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:1]))
			if d := ttl(); d <= 59*time.Minute {
				t.Fatalf("a new key's TTL = %v, want about 1h", d)
			}
			must(t, a.rdb.PExpire(ctx, key, 30*time.Minute).Err())
			must(t, a.Speculate(a.pods["p2"], blocks[:1]))
			if d := ttl(); d > 30*time.Minute || d <= 29*time.Minute {
				t.Errorf("after an append to a key refreshed a moment ago, TTL = %v, want the 30m set (no refresh)", d)
			}
			must(t, a.rdb.Del(ctx, key).Err())
			must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:1]))
			if d := ttl(); d <= 59*time.Minute {
				t.Errorf("a key recreated by an append: TTL = %v, want about 1h", d)
			}
		})
	}
}

// TestBlockKeysWithoutTTL: with index.redis.ttl 0 an append sets no TTL
// (one command a block), nor does a new lease holder's copy; the load table
// keeps one. A pod table lost while the leases stay is numbered again at
// the next lease tick. The bound is then Redis's maxmemory with an allkeys
// policy: checkBound says so, and under allkeys-lfu a fill far past
// maxmemory is evicted, never refused; the pod table and a key matches
// read outlive it, and a match finds what eviction left of the blocks
// written last.
func TestBlockKeysWithoutTTL(t *testing.T) {
	for _, path := range []string{"raw", "go-redis"} {
		t.Run(path, func(t *testing.T) {
			srv := redisserver.New(t)
			noTTL := func(c *Config) { c.TTL = 0 }
			a, b := newReplica(t, srv.Addr, "a", noTTL), newReplica(t, srv.Addr, "b", noTTL)
			if path == "go-redis" {
				a.raw.close()
				a.raw = nil
			}
			ctx := context.Background()
			// The policy from the start, as a server's configuration sets
			// it: keys written under another keep no LFU counts.
			must(t, a.rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err())
			if a.checkBound() || testutil.ToFloat64(a.metrics.unbounded) != 1 || !a.Unbounded() {
				t.Fatal("no maxmemory: checkBound = true or the unbounded gauge is not 1, want the bound reported missing")
			}
			a.tick()
			pttl := func(key string) time.Duration {
				t.Helper()
				d, err := a.rdb.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:2]))
			must(t, a.Speculate(a.pods["p2"], blocks[2:3]))
			for _, h := range blocks[:3] {
				if d := pttl(string(a.blockKey(nil, nsTag("m"), h))); d != -1 {
					t.Errorf("block %#x: PTTL = %v, want -1 (no TTL)", h, d)
				}
			}
			// b takes p1 over and copies its view: still no TTL.
			must(t, b.Stored(b.pods["p1"], kvindex.TierGPU, blocks[3:4]))
			must(t, a.rdb.Del(ctx, "test:lease:{p1}").Err())
			b.tick()
			if !b.pod(b.pods["p1"]).held.Load() {
				t.Fatal("b did not take p1's free lease")
			}
			if d := pttl(string(a.blockKey(nil, nsTag("m"), blocks[3]))); d != -1 {
				t.Errorf("a block the new holder copied: PTTL = %v, want -1", d)
			}
			if got := a.match(blocks[3:4])["p1"].Blocks; got != 1 {
				t.Errorf("after the takeover Match(p1) = %d blocks, want b's view (1)", got)
			}
			a.Charge(a.pods["p1"], 100, 1)
			if d := pttl(string(a.loadKey(nsTag("m")))); d <= 59*time.Minute {
				t.Errorf("the load table's PTTL = %v, want about an hour", d)
			}

			// A pod table lost while the leases stay (an allkeys-* policy
			// evicted it): the holders' next ticks number their pods again
			// and copy their views.
			must(t, a.rdb.Del(ctx, a.podsKey(nsTag("m"))).Err())
			if got := a.match(blocks[3:4])["p1"].Blocks; got != 0 {
				t.Fatalf("with no pod table Match(p1) = %d blocks, want 0", got)
			}
			a.tick()
			b.tick()
			if got := a.match(blocks[3:4])["p1"].Blocks; got != 1 {
				t.Errorf("the pod table lost, then a lease tick: Match(p1) = %d blocks, want b's view (1)", got)
			}

			// The bound: maxmemory a little above what Redis uses now,
			// allkeys-lfu (the pod table, read at every match, outlives
			// the blocks written once).
			base := int64(info(t, a.rdb, "memory", "used_memory"))
			must(t, a.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(base+2<<20, 10)).Err())
			if !a.checkBound() || testutil.ToFloat64(a.metrics.unbounded) != 0 || a.Unbounded() {
				t.Fatal("maxmemory with allkeys-lfu: checkBound = false or the unbounded gauge is not 0")
			}
			// Matches read p1's block and the pod table often, as a busy
			// router does: LFU counts them above a key written once, by more
			// than the one count a minute's decay takes (a minute may turn
			// during the fill).
			for range 100 {
				a.match(blocks[3:4])
			}
			rng := rand.New(rand.NewPCG(5, 6))
			batch := make([]uint64, 16)
			for range 4000 { // 64,000 new blocks, ~6 MB of keys
				for j := range batch {
					batch[j] = rng.Uint64()
				}
				must(t, a.Stored(a.pods["p2"], kvindex.TierGPU, batch))
			}
			if info(t, a.rdb, "stats", "evicted_keys") == 0 {
				t.Error("evicted_keys = 0 after a fill past maxmemory, want evictions")
			}
			if up, _ := a.Up(); !up || testutil.ToFloat64(a.metrics.refused.WithLabelValues("type")) != 0 {
				t.Errorf("under eviction: up = %v, refused appends = %v, want up and none refused",
					up, testutil.ToFloat64(a.metrics.refused.WithLabelValues("type")))
			}
			// No more eviction from here: at a limit this tight the reads
			// below (their replies' buffers) would evict too.
			must(t, a.rdb.ConfigSet(ctx, "maxmemory", "0").Err())
			// The blocks written last, as many as eviction left of them:
			// matched up to the first evicted one.
			kept := 0
			for _, h := range batch {
				if a.rdb.Exists(ctx, string(a.blockKey(nil, nsTag("m"), h))).Val() == 0 {
					break
				}
				kept++
			}
			if got := a.match(batch)["p2"].Blocks; got != kept || kept == 0 {
				t.Errorf("the batch written last: Match(p2) = %d blocks, want the %d left (and some)", got, kept)
			}
			if got := a.match(blocks[3:4])["p1"].Blocks; got != 1 {
				t.Errorf("after the fill Match(p1) = %d blocks, want 1 (its key read since, the pod table kept)", got)
			}
		})
	}
}

// info reads a number from Redis's INFO section.
func info(t *testing.T, rdb redis.UniversalClient, section, field string) float64 {
	t.Helper()
	out, err := rdb.Info(context.Background(), section).Result()
	must(t, err)
	if !strings.Contains(out, "\r\n"+field+":") {
		t.Fatalf("INFO %s has no %s", section, field)
	}
	return infoField(out, field)
}

// TestSpeculationCoalesced: in one group commit, a pod's speculative
// record on a block that a later one of the same pod overrides is not
// written; other pods' records and real records all are.
func TestSpeculationCoalesced(t *testing.T) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", nil)
	a.tick()
	tag := nsTag("m")
	n1, n2 := a.pod(a.pods["p1"]).num.Load(), a.pod(a.pods["p2"]).num.Load()
	far, near := uint64(1<<62), uint64(1<<61)
	stored := appendRecord(nil, n1, uint8(kvindex.TierGPU), 1, 7)
	batch := []*appendReq{
		{tag: tag, hashes: blocks[:2], rec: appendRecord(nil, n1, kindSpec, 0, far)},
		{tag: tag, hashes: blocks[:1], rec: appendRecord(nil, n2, kindSpec, 0, far)},
		{tag: tag, hashes: blocks[:1], rec: stored},
		{tag: tag, hashes: blocks[:1], rec: appendRecord(nil, n1, kindSpec, 0, near)},
		// p2 on block 1: a speculation settled twice; the first settling
		// is the one that counts.
		{tag: tag, hashes: blocks[1:2], rec: appendRecord(nil, n2, kindSpec, specSettle, near)},
		{tag: tag, hashes: blocks[1:2], rec: appendRecord(nil, n2, kindSpec, 0, far)},
		{tag: tag, hashes: blocks[1:2], rec: appendRecord(nil, n2, kindSpec, specSettle, near)},
		{tag: tag, hashes: blocks[1:2], rec: appendRecord(nil, n2, kindSpec, specSettle, far-1)},
	}
	must(t, a.appendNow(batch))
	val, err := a.rdb.Get(context.Background(), string(a.blockKey(nil, tag, blocks[0]))).Bytes()
	must(t, err)
	var want []byte
	want = appendRecord(want, n2, kindSpec, 0, far)
	want = append(want, stored...)
	want = appendRecord(want, n1, kindSpec, 0, near)
	if string(val) != string(want) {
		t.Errorf("block 0's records = %x, want %x (p1's first speculation coalesced into its last)", val, want)
	}
	val, err = a.rdb.Get(context.Background(), string(a.blockKey(nil, tag, blocks[1]))).Bytes()
	must(t, err)
	want = appendRecord(nil, n1, kindSpec, 0, far)
	want = appendRecord(want, n2, kindSpec, 0, far)
	want = appendRecord(want, n2, kindSpec, specSettle, near)
	if string(val) != string(want) {
		t.Errorf("block 1's records = %x, want %x (p1's: nothing overrides it; p2's speculation and its first settling after)", val, want)
	}
}

// TestStaleWriterFenced: a replica that lost a pod's lease without knowing
// it yet (paused past the lease TTL) cannot clear the pod under the new
// holder: the epoch fences it, and it stops writing the pod's events.
func TestStaleWriterFenced(t *testing.T) {
	srv := redisserver.New(t)
	a, b := newReplica(t, srv.Addr, "a", nil), newReplica(t, srv.Addr, "b", nil)
	b.tick() // b holds every lease
	if !b.pod(b.pods["p1"]).held.Load() {
		t.Fatal("b does not hold p1's lease")
	}
	must(t, b.rdb.Del(context.Background(), b.leaseKey("p1")).Err()) // b's lease expired
	a.tick()                                                         // a takes p1: a new epoch
	if !a.pod(a.pods["p1"]).held.Load() {
		t.Fatal("a did not take p1's lease")
	}
	must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[:3]))
	must(t, b.ClearPod(b.pods["p1"])) // b still believes it holds p1
	if b.pod(b.pods["p1"]).held.Load() {
		t.Error("b still writes p1's events after its clear was fenced")
	}
	if got := testutil.ToFloat64(b.metrics.fenced); got != 1 {
		t.Errorf("leases_fenced_total = %v, want 1", got)
	}
	must(t, b.Stored(b.pods["p1"], kvindex.TierGPU, blocks[3:4])) // local only now
	if got := a.match(blocks)["p1"].Blocks; got != 3 {
		t.Errorf("Match(p1) = %d blocks, want a's 3: b's stale clear must not hide them", got)
	}
	// a's own clears are not fenced.
	must(t, a.ClearPod(a.pods["p1"]))
	if got := a.match(blocks)["p1"].Blocks; got != 0 || !a.pod(a.pods["p1"]).held.Load() {
		t.Errorf("after a's clear: Match(p1) = %d blocks, held %v; want 0, still held", got, a.pod(a.pods["p1"]).held.Load())
	}
}

// TestAppendsToExistingKeys: a record appended to a key another replica
// wrote lands after the others' and refreshes the key's TTL, and a batch
// writing one key twice keeps the pod's records in order.
func TestAppendsToExistingKeys(t *testing.T) {
	for _, path := range []string{"raw", "go-redis"} {
		t.Run(path, func(t *testing.T) {
			srv := redisserver.New(t)
			a := newReplica(t, srv.Addr, "a", nil)
			if path == "go-redis" {
				a.raw.close()
				a.raw = nil
			}
			a.tick()
			ctx := context.Background()
			tag := nsTag("m")
			key := string(a.blockKey(nil, tag, blocks[0]))
			n1 := a.pod(a.pods["p1"]).num.Load()
			other := appendRecord(nil, 99, kindSpec, 0, 1<<62)
			must(t, a.rdb.Set(ctx, key, other, 30*time.Minute).Err()) // written by another replica
			ep := a.pod(a.pods["p1"]).mu.epoch
			stored := appendRecord(nil, n1, uint8(kvindex.TierGPU), 1, ep)
			removed := appendRecord(nil, n1, uint8(kvindex.TierGPU), -1, ep)
			must(t, a.appendNow([]*appendReq{
				{tag: tag, hashes: blocks[:1], rec: stored},
				{tag: tag, hashes: blocks[:1], rec: removed},
			}))
			val, err := a.rdb.Get(ctx, key).Bytes()
			must(t, err)
			if want := string(other) + string(stored) + string(removed); string(val) != want {
				t.Errorf("records = %x, want %x: the other's, then p1's in order", val, want)
			}
			if d, err := a.rdb.PTTL(ctx, key).Result(); err != nil || d <= 59*time.Minute {
				t.Errorf("TTL = %v, %v; want refreshed to about 1h", d, err)
			}
			if got := a.match(blocks)["p1"].Blocks; got != 0 {
				t.Errorf("Match(p1) = %d blocks, want 0 (stored then removed)", got)
			}
			// Another key, existing, written once.
			key1 := string(a.blockKey(nil, tag, blocks[1]))
			must(t, a.rdb.Set(ctx, key1, other, 30*time.Minute).Err())
			must(t, a.Stored(a.pods["p1"], kvindex.TierGPU, blocks[1:2]))
			if val, err := a.rdb.Get(ctx, key1).Bytes(); err != nil || string(val) != string(other)+string(stored) {
				t.Errorf("records = %x, %v; want the other's, then p1's", val, err)
			}
			if d, err := a.rdb.PTTL(ctx, key1).Result(); err != nil || d <= 59*time.Minute {
				t.Errorf("TTL = %v, %v; want refreshed to about 1h", d, err)
			}
		})
	}
}

// TestMatchAgreesWithLocalView: after every few of a random run of stores,
// removals (of blocks held and not), clears, speculation and settling on
// six pods, in every tier, and after every block key is compacted now and
// then, Match through Redis reports for every candidate exactly what the
// local view, kvindex's own Match, reports. In wide, 64 pods that hold
// nothing come between the six's first two and the rest among the
// candidates: the count keeps candidates in 64-bit words, and four of the
// six are then in the second.
func TestMatchAgreesWithLocalView(t *testing.T) {
	srv := redisserver.New(t)
	for _, idle := range []int{0, 64} {
		t.Run(map[int]string{0: "six", 64: "wide"}[idle], func(t *testing.T) {
			matchAgreesWithLocalView(t, srv.Addr, idle, time.Hour, false)
		})
	}
	// No TTL: appends without PEXPIREAT, copies without TTLs.
	t.Run("no-ttl", func(t *testing.T) { matchAgreesWithLocalView(t, srv.Addr, 0, 0, false) })
	// With Run running: events queued, not waited for, and written by the
	// group writer two pipelines at a time, a clear's new epoch reaching
	// Redis before the events queued ahead of it; the compactor at work
	// too. Flushed before each comparison.
	t.Run("run", func(t *testing.T) { matchAgreesWithLocalView(t, srv.Addr, 0, time.Hour, true) })
}

func matchAgreesWithLocalView(t *testing.T, addr string, idle int, ttl time.Duration, run bool) {
	// One clock for both, so that a speculative entry lapses for both at
	// once, moved 10 ms at each operation: the 2 s grace of a settled
	// entry runs out within the run, and a pod's clear (its epoch, the
	// clock in ms) falls between the speculation before it and after.
	var ms atomic.Int64
	clock := func() time.Time { return time.UnixMilli(1_767_225_600_000 + ms.Load()) }
	kcfg := kvindex.DefaultConfig()
	kcfg.Now = clock
	local, err := kvindex.New(kcfg, nil)
	must(t, err)
	cfg := DefaultConfig()
	cfg.Addrs, cfg.Now, cfg.TTL = []string{addr}, clock, ttl
	cfg.Prefix = fmt.Sprintf("agree%d-%v-%v:", idle, ttl, run)
	x, err := New(cfg, local, kcfg, slog.New(slog.DiscardHandler), nil)
	must(t, err)
	t.Cleanup(func() { _ = x.close() })
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = x.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		waitFor(t, "the group writer", 20*time.Second, x.grouping.Load)
	}
	var ids []kvindex.PodID
	for i := range 6 {
		ids = append(ids, x.AddPod(fmt.Sprintf("pod-%d", i), "m"))
	}
	all := slices.Clone(ids[:2]) // the candidates: the six, idle pods among them
	for i := range idle {
		all = append(all, x.AddPod(fmt.Sprintf("idle-%d", i), "m"))
	}
	all = append(all, ids[2:]...)
	x.tick() // every lease
	rng := rand.New(rand.NewPCG(7, 11))
	chains := make([][]uint64, 8) // prompts sharing prefixes: chain i continues chain i/2's first blocks
	for i := range chains {
		n := 4 + rng.IntN(28)
		if i > 0 {
			chains[i] = slices.Clone(chains[i/2][:rng.IntN(len(chains[i/2]))])
		}
		for len(chains[i]) < n {
			chains[i] = append(chains[i], rng.Uint64())
		}
	}
	var got, want []kvindex.PodMatch
	for op := range 600 {
		ms.Add(10)
		pod := ids[rng.IntN(len(ids))]
		ch := chains[rng.IntN(len(chains))]
		from := rng.IntN(len(ch))
		part := ch[from:min(len(ch), from+1+rng.IntN(4))]
		tier := kvindex.Tier(rng.IntN(kvindex.NumTiers))
		switch k := rng.IntN(20); {
		case k < 9:
			must(t, x.Stored(pod, tier, ch[:1+rng.IntN(len(ch))]))
		case k < 14:
			must(t, x.Removed(pod, tier, part))
		case k < 15:
			must(t, x.ClearPod(pod))
		case k < 18:
			must(t, x.Speculate(pod, ch[:1+rng.IntN(len(ch))]))
		default:
			must(t, x.Settle(pod, ch))
		}
		if op%5 != 4 {
			continue
		}
		if run {
			must(t, x.Flush())
		}
		if op%50 == 49 { // every block key compacted: the same matches
			for _, ch := range chains {
				for _, h := range ch {
					c := compaction{nsTag("m"), string(x.blockKey(nil, nsTag("m"), h))}
					must(t, x.compactKey(context.Background(), c))
				}
			}
		}
		for _, ch := range chains {
			cands := all[rng.IntN(2):] // now and then not every pod
			got = x.Match("m", ch, cands, got)
			want = x.local.Match("m", ch, cands, want)
			if !slices.Equal(got, want) {
				t.Fatalf("after op %d: Match through Redis = %+v, the local view's = %+v", op, got, want)
			}
		}
	}
}
