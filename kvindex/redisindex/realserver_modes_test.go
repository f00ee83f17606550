package redisindex

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

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
