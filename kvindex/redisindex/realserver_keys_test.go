package redisindex

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

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
			b.seasoned().tick()
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
			ticked := time.Now()
			for range 4000 { // 64,000 new blocks, ~6 MB of keys
				renewDue(a.Index, &ticked)
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
	a.seasoned().tick()                                              // a takes p1: a new epoch
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
			matchAgreesWithLocalView(t, srv.Addr, idle, time.Hour, false, false)
		})
	}
	// Pods of a hybrid model, full attention and a sliding window: matches
	// through Redis are priced by the groups of the local view, their
	// tiers counted again from the blocks Redis tallied off the GPU.
	t.Run("hybrid", func(t *testing.T) { matchAgreesWithLocalView(t, srv.Addr, 0, time.Hour, false, true) })
	// No TTL: appends without PEXPIREAT, copies without TTLs.
	t.Run("no-ttl", func(t *testing.T) { matchAgreesWithLocalView(t, srv.Addr, 0, 0, false, false) })
	// With Run running: events queued, not waited for, and written by the
	// group writer two pipelines at a time, a clear's new epoch reaching
	// Redis before the events queued ahead of it; the compactor at work
	// too. Flushed before each comparison.
	t.Run("run", func(t *testing.T) { matchAgreesWithLocalView(t, srv.Addr, 0, time.Hour, true, false) })
}

func matchAgreesWithLocalView(t *testing.T, addr string, idle int, ttl time.Duration, run, hybrid bool) {
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
	cfg.Prefix = fmt.Sprintf("agree%d-%v-%v-%v:", idle, ttl, run, hybrid)
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
	if hybrid { // half the pods: 16-token blocks, a 32-token window
		for _, id := range ids[:3] {
			must(t, x.SetGroups(id, 16, []kvindex.Group{{Index: 0, Kind: kvindex.GroupFull}, {Index: 1, Kind: kvindex.GroupSlidingWindow, Window: 32}}))
		}
	}
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
	ticked := time.Now()
	for op := range 600 {
		ms.Add(10)
		if !run {
			renewDue(x, &ticked)
		}
		pod := ids[rng.IntN(len(ids))]
		ch := chains[rng.IntN(len(chains))]
		from := rng.IntN(len(ch))
		part := ch[from:min(len(ch), from+1+rng.IntN(4))]
		tier := kvindex.Tier(rng.IntN(kvindex.NumTiers))
		if hybrid && rng.IntN(2) == 0 { // the window's group
			keys := make([]uint64, len(part))
			for i, h := range part {
				keys[i] = kvindex.GroupKey(h, 1)
			}
			if rng.IntN(3) == 0 {
				must(t, x.Removed(pod, kvindex.TierGPU, keys))
			} else {
				must(t, x.Stored(pod, kvindex.TierGPU, keys))
			}
		}
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
