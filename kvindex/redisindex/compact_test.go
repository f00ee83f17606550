package redisindex

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
)

func TestFold(t *testing.T) {
	const now = 1000
	rec := func(num uint32, kind uint8, delta int8, v uint64) []byte {
		return appendRecord(nil, num, kind, delta, v)
	}
	cat := func(rs ...[]byte) []byte { return bytes.Join(rs, nil) }
	spec := func(num uint32, v uint64) []byte { return rec(num, kindSpec, 0, v) }
	settle := func(num uint32, v uint64) []byte { return rec(num, kindSpec, specSettle, v) }
	// A table of no version (one older writers kept): no summaries.
	tab := podTable{epochs: map[uint32]uint64{1: 5, 2: 7, 4: 2000, 5: 8}, bases: map[uint32]uint64{5: 3}, vers: map[uint32]uint64{}}
	lives := specLives{ttl: 100, grace: 10}
	for _, tt := range []struct {
		name string
		in   []byte
		want []byte
	}{
		{"counts summed", cat(rec(1, 0, 1, 5), rec(1, 0, 1, 5), rec(1, 1, 1, 5)), cat(rec(1, 0, 2, 5), rec(1, 1, 1, 5))},
		{"removed to zero", cat(rec(1, 0, 1, 5), rec(1, 0, -1, 5)), nil},
		{"a removal of an absent block is ignored", cat(rec(1, 0, -1, 5), rec(1, 0, 1, 5)), rec(1, 0, 1, 5)},
		{"older epochs dropped", cat(rec(1, 0, 1, 4), rec(2, 2, 1, 7)), rec(2, 2, 1, 7)},
		// Pod 5's lease was taken over, continuing it: its records since
		// its last clear (epoch 3) count, written again under epoch 8.
		{"a continued pod's records since its clear kept", cat(rec(5, 0, 1, 2), rec(5, 0, 1, 3), rec(5, 0, 1, 8), rec(5, 1, 1, 4)), cat(rec(5, 0, 2, 8), rec(5, 1, 1, 8))},
		// Read after the pod table: a new holder's records (a newer epoch,
		// or a pod numbered since) stay as they are, in their order.
		{"newer epochs and new pods kept", cat(rec(1, 0, 1, 6), rec(3, 0, 1, 5), rec(1, 0, 1, 5), rec(1, 0, -1, 6)), cat(rec(1, 0, 1, 5), rec(1, 0, 1, 6), rec(3, 0, 1, 5), rec(1, 0, -1, 6))},
		{"the last speculation wins", cat(rec(1, kindSpec, 0, 5000), rec(1, kindSpec, 0, 2000)), rec(1, kindSpec, 0, 2000)},
		{"expired speculation dropped", cat(rec(1, kindSpec, 0, 5000), rec(1, kindSpec, 0, now)), nil},
		{"unknown kinds dropped", cat(rec(1, 9, 1, 5), rec(2, 0, 1, 7)), rec(2, 0, 1, 7)},
		{"a GPU store confirms the speculation", cat(spec(1, 5000), rec(1, 0, 1, 5)), rec(1, 0, 1, 5)},
		{"a CPU store does not", cat(spec(1, 5000), rec(1, 1, 1, 5)), cat(rec(1, 1, 1, 5), spec(1, 5000))},
		{"a speculation after the store stays", cat(rec(1, 0, 1, 5), spec(1, 5000)), cat(rec(1, 0, 1, 5), spec(1, 5000))},
		{"a speculation again after the store stays, after it", cat(spec(1, 5000), rec(1, 0, 1, 5), spec(1, 6000)), cat(rec(1, 0, 1, 5), spec(1, 6000))},
		{"a new epoch's store keeps the pod's speculation as it was", cat(spec(1, 5000), rec(1, 0, 1, 6)), cat(spec(1, 5000), rec(1, 0, 1, 6))},
		{"a settling shortens the speculation", cat(spec(1, 5000), settle(1, 2000)), cat(spec(1, 5000), settle(1, 2000))},
		{"the first settling counts", cat(spec(1, 5000), settle(1, 2000), settle(1, 3000)), cat(spec(1, 5000), settle(1, 2000))},
		{"a new speculation ends the settling", cat(spec(1, 5000), settle(1, 2000), spec(1, 6000)), spec(1, 6000)},
		{"a settling creates no speculation", settle(1, 2000), nil},
		{"a settled speculation expires", cat(spec(1, 5000), settle(1, now)), nil},
		// Written before the pod's epoch began (deadline less its life):
		// the pod's from before its clear.
		{"speculation before the clear dropped", cat(spec(4, 2099), spec(2, 5000)), spec(2, 5000)},
		{"speculation after the clear kept", spec(4, 2100), spec(4, 2100)},
		{"a settling before the clear dropped", cat(spec(4, 2500), settle(4, 2009)), spec(4, 2500)},
		{"speculation of a pod numbered since kept as it is", cat(settle(3, 2000), spec(1, 5000)), cat(spec(1, 5000), settle(3, 2000))},
	} {
		if got := fold(tt.in, tab, now, lives); !bytes.Equal(got, tt.want) {
			t.Errorf("%s: fold = %x, want %x", tt.name, got, tt.want)
		}
	}
}

// TestFoldSummary: with a table version, the pods holding a block once in
// the GPU tier fold into one summary, the rest into records after it; a
// summary read back counts its members as stores of their epochs, less
// those whose epoch changed since its version.
func TestFoldSummary(t *testing.T) {
	const now = 1000
	rec := func(num uint32, kind uint8, delta int8, v uint64) []byte {
		return appendRecord(nil, num, kind, delta, v)
	}
	cat := func(rs ...[]byte) []byte { return bytes.Join(rs, nil) }
	lives := specLives{ttl: 100, grace: 10}
	tab := podTable{epochs: map[uint32]uint64{1: 5, 2: 7, 4: 2000, 300: 9}, vers: map[uint32]uint64{1: 50, 2: 60, 4: 100, 300: 70}, version: 100}
	in := cat(rec(1, 0, 1, 5), rec(2, 0, 1, 7), rec(2, 0, 1, 7), rec(300, 0, 1, 9), rec(4, 0, 1, 2000), rec(1, 1, 1, 5), rec(3, 0, 1, 1))
	got := fold(in, tab, now, lives)
	want := cat(summaryOf(100, []uint32{1, 4, 300}), rec(2, 0, 2, 7), rec(1, 1, 1, 5), rec(3, 0, 1, 1))
	if !bytes.Equal(got, want) {
		t.Fatalf("fold = %x, want %x", got, want)
	}
	if n := len(summaryOf(100, []uint32{1, 4, 300})); n != 2*recordSize {
		t.Errorf("a summary of 3 pods takes %d bytes, want 32 (a header and one record of body)", n)
	}
	// Pod 4 cleared since (a new epoch at version 150), pod 1 not: folded
	// again, pod 4's summary membership counts for nothing.
	tab.epochs[4], tab.vers[4], tab.version = 2100, 150, 150
	again := fold(got, tab, now, lives)
	want = cat(summaryOf(150, []uint32{1, 300}), rec(2, 0, 2, 7), rec(1, 1, 1, 5), rec(3, 0, 1, 1))
	if !bytes.Equal(again, want) {
		t.Fatalf("folded again after pod 4's clear = %x, want %x", again, want)
	}
	// A body of no known shape ends what can be read.
	bad := cat(rec(1, kindSummary, 0, 100), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, rec(2, 0, 1, 7))
	if got := fold(bad, tab, now, lives); len(got) != 0 {
		t.Errorf("fold of a bad summary = %x, want nothing", got)
	}
}

// TestCompaction: a block key stored and removed over and over stays
// short, and matches say the same before and after.
func TestCompaction(t *testing.T) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", nil)
	a.tick()
	p1 := a.pods["p1"]
	for range 100 {
		must(t, a.Stored(p1, kvindex.TierGPU, blocks[:2]))
		must(t, a.Removed(p1, kvindex.TierGPU, blocks[1:2]))
	}
	before := a.match(blocks)["p1"]
	if before.Blocks != 1 {
		t.Fatalf("Match(p1) = %+v, want 1 block (the second stored and removed as often)", before)
	}
	queued := len(a.compact)
	if queued == 0 {
		t.Fatal("no key was queued for compaction after 300 appends")
	}
	compactQueued(t, a.Index, float64(queued))
	ctx := context.Background()
	for i, want := range []int64{recordSize, 0} {
		n, err := a.rdb.StrLen(ctx, string(a.blockKey(nil, nsTag("m"), blocks[i]))).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("block %d's key after compaction: %d bytes, want %d", i, n, want)
		}
	}
	if after := a.match(blocks)["p1"]; after != before {
		t.Errorf("Match(p1) after compaction = %+v, want %+v as before", after, before)
	}
}

// compactQueued runs x's compactor until it has compacted done keys.
func compactQueued(t *testing.T, x *Index, done float64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); x.compactor(ctx) }()
	defer func() { cancel(); <-stopped }()
	waitFor(t, "the queued keys compacted", 20*time.Second, func() bool {
		return testutil.ToFloat64(x.metrics.compactions.WithLabelValues("done")) >= done
	})
}

// TestCompactionOfAHotKey: a key appended to without pause while its
// compactions run (every decision speculating a shared prefix) is
// compacted each time it grows past 64 records, none lost to the appends,
// and stays short.
func TestCompactionOfAHotKey(t *testing.T) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", nil)
	a.tick()
	p1, p2 := a.pods["p1"], a.pods["p2"]
	must(t, a.Stored(p1, kvindex.TierGPU, blocks[:1]))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.compactor(ctx) }()
	var appenders sync.WaitGroup
	for _, pod := range []kvindex.PodID{p1, p2} {
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			for range 1000 {
				if err := a.Speculate(pod, blocks[:1]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	appenders.Wait()
	key := string(a.blockKey(nil, nsTag("m"), blocks[0]))
	// 2,000 appends cross 64 records at least every 128 (a key compacted
	// while appends went on starts longer than one record per holder); the
	// last compaction dequeued may still be under way as the queue empties.
	waitFor(t, "the hot key compacted at least 15 times and short", 20*time.Second, func() bool {
		n, err := a.rdb.StrLen(context.Background(), key).Result()
		return err == nil && n <= 2*compactEvery && len(a.compact) == 0 &&
			testutil.ToFloat64(a.metrics.compactions.WithLabelValues("done")) >= 2000/128
	})
	cancel()
	<-done
	compacted := testutil.ToFloat64(a.metrics.compactions.WithLabelValues("done"))
	raced := testutil.ToFloat64(a.metrics.compactions.WithLabelValues("raced"))
	if raced != 0 || compacted < 2000/128 {
		t.Errorf("compactions: %v done, %v raced; want none raced, at least %d done", compacted, raced, 2000/128)
	}
	n, err := a.rdb.StrLen(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n > 2*compactEvery {
		t.Errorf("the hot key is %d records long, want under %d", n/recordSize, 2*compactEvery/recordSize)
	}
	got := a.match(blocks[:1])
	if got["p1"].Tiers[kvindex.TierGPU] != 1 || got["p2"].Speculative != 1 {
		t.Errorf("Match = %+v, want p1 holding the block, p2 speculatively", got)
	}
}

// TestMatchQueuesLongKeys: blocks 20 pods stored once each are 20
// records, short of the 64 that appends compact at; the first match that
// reads them queues their keys (once, however often it matches), the
// compactor folds them into summaries, and the matches say the same
// before and after.
func TestMatchQueuesLongKeys(t *testing.T) {
	srv := redisserver.New(t)
	var ms atomic.Int64
	clock := func() time.Time { return time.UnixMilli(1_767_225_600_000 + ms.Load()) }
	a := newReplica(t, srv.Addr, "a", func(cfg *Config) { cfg.Now = clock })
	ids := []kvindex.PodID{a.pods["p1"], a.pods["p2"]}
	for i := range 18 {
		ids = append(ids, a.AddPod(fmt.Sprintf("q%d", i), "m"))
	}
	a.tick()
	for _, id := range ids {
		must(t, a.Stored(id, kvindex.TierGPU, blocks[:3]))
		must(t, a.Speculate(id, blocks[4:5])) // 20 records no compaction would fold: not queued
	}
	must(t, a.Stored(ids[0], kvindex.TierGPU, blocks[3:4])) // one record: not queued
	if n := len(a.compact); n != 0 {
		t.Fatalf("%d keys queued by 41 appends, want none", n)
	}
	if got := a.Match("m", blocks[4:5], ids, nil); got[0].Speculative != 1 || len(a.compact) != 0 {
		t.Fatalf("Match = %+v with %d keys queued, want p1 speculative on the block, none queued", got[0], len(a.compact))
	}
	before := a.Match("m", blocks[:4], ids, nil)
	for range 3 {
		if got := a.Match("m", blocks[:4], ids, nil); !slices.Equal(got, before) {
			t.Fatalf("Match = %+v, then %+v", before, got)
		}
	}
	if n := len(a.compact); n != 3 {
		t.Fatalf("%d keys queued by four matches, want the three of 20 records, once each", n)
	}
	compactQueued(t, a.Index, 3)
	for _, h := range blocks[:3] {
		n, err := a.rdb.StrLen(context.Background(), string(a.blockKey(nil, nsTag("m"), h))).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 3*recordSize {
			t.Errorf("block %x's key after compaction: %d bytes, want one summary of 20 pods (48)", h, n)
		}
	}
	ms.Add(readQueuedEvery.Milliseconds()) // past the memory of the keys queued
	if after := a.Match("m", blocks[:4], ids, nil); !slices.Equal(after, before) {
		t.Errorf("Match after compaction = %+v, want %+v as before", after, before)
	}
	if n := len(a.compact); n != 0 {
		t.Errorf("%d keys queued by a match after the compaction, want none: they are short", n)
	}
	if before[0].Blocks != 4 || before[1].Blocks != 3 {
		t.Errorf("Match = %+v, want p1 at 4 blocks, the others at 3", before)
	}
}

// TestMatchQueuesOverlongKeys: a key whose compactions were dropped (the
// queue emptied here by hand) is queued by the match that reads it, past
// the holder bound (refused meanwhile) or twice the length appends compact
// at, and once folded it reads again.
func TestMatchQueuesOverlongKeys(t *testing.T) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", func(cfg *Config) { cfg.MaxHolders = 150 })
	a.tick()
	p1 := a.pods["p1"]
	for range 100 { // 201 records on block 0, past the bound of 150
		must(t, a.Stored(p1, kvindex.TierGPU, blocks[:1]))
		must(t, a.Removed(p1, kvindex.TierGPU, blocks[:1]))
	}
	must(t, a.Stored(p1, kvindex.TierGPU, blocks[:1]))
	for range 70 { // 141 on block 1: within the bound, past twice 64
		must(t, a.Speculate(p1, blocks[1:2]))
		must(t, a.Settle(p1, blocks[1:2]))
	}
	must(t, a.Speculate(p1, blocks[1:2]))
	for len(a.compact) > 0 {
		<-a.compact // dropped
	}
	ids := []kvindex.PodID{p1}
	if got := a.Match("m", blocks[:1], ids, nil); got[0].Blocks != 0 || len(a.compact) != 1 {
		t.Fatalf("Match of the key past the bound = %+v with %d keys queued, want none (refused) and it queued", got[0], len(a.compact))
	}
	if got := a.Match("m", blocks[1:2], ids, nil); got[0].Speculative != 1 || len(a.compact) != 2 {
		t.Fatalf("Match of the long key = %+v with %d keys queued, want p1 speculative and it queued", got[0], len(a.compact))
	}
	compactQueued(t, a.Index, 2)
	if got := a.Match("m", blocks[:2], ids, nil); got[0].Blocks != 2 || got[0].Speculative != 1 {
		t.Errorf("Match after compaction = %+v, want p1 holding block 0 and speculative on block 1", got[0])
	}
}

// TestCountsDoNotWrap: a key of 259 records each storing the block 127
// times for one pod (no writer writes it; the holder bound is 1,024
// records) holds the block for the match as for the compaction, which
// folds it to one record of 127: a count that wrapped at 32,767 would say
// the block is not held before the compaction and held after.
func TestCountsDoNotWrap(t *testing.T) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", nil)
	a.tick()
	ps := a.pod(a.pods["p1"])
	ps.mu.Lock()
	num, epoch := ps.mu.num, ps.mu.epoch
	ps.mu.Unlock()
	var val []byte
	for range 259 {
		val = appendRecord(val, num, uint8(kvindex.TierGPU), 127, epoch)
	}
	key := string(a.blockKey(nil, nsTag("m"), blocks[0]))
	must(t, a.rdb.Set(context.Background(), key, val, 0).Err())
	for _, when := range []string{"before", "after"} {
		if when == "after" {
			must(t, a.compactKey(context.Background(), compaction{nsTag("m"), key}))
		}
		if got := a.match(blocks[:1])["p1"]; got.Tiers[kvindex.TierGPU] != 1 {
			t.Errorf("Match(p1) %s the compaction = %+v, want the block held on the GPU", when, got)
		}
	}
}

// TestSummaryCountsAsItsRecords: a match counts a summary exactly as the
// GPU stores it stands for (expand), wherever it lies among a block's
// records: after records naming its members, after another summary naming
// them, before removals, cut short by a malformed body, with members whose
// epoch changed since its version. Random block values over five
// candidates and a pod that is none; the fast path (bits) and the long way
// both run.
func TestSummaryCountsAsItsRecords(t *testing.T) {
	x := fuzzIndex(t)
	x.cfg.MaxHolders = 1024
	// Pods 1–5 are candidates, epochs 10+num; 3 and 5 changed epoch at
	// version 50. Pod 9 is no candidate.
	tab := podTable{epochs: map[uint32]uint64{}, vers: map[uint32]uint64{}, version: 60}
	var names []string
	var table []byte
	var spans []span
	for num := uint32(1); num <= 5; num++ {
		ver := uint64(20)
		if num == 3 || num == 5 {
			ver = 50
		}
		tab.epochs[num], tab.vers[num] = 10+uint64(num), ver
		names = append(names, fmt.Sprintf("p%d", num))
		entry := fmt.Sprintf("%d:%d:%d", num, 10+num, ver)
		spans = append(spans, span{off: int32(len(table)), n: int32(len(entry))})
		table = append(table, entry...)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	record := func() []byte {
		num := uint32(1 + rng.IntN(5))
		if rng.IntN(8) == 0 {
			num = 9
		}
		ep := 10 + uint64(num)
		switch rng.IntN(6) {
		case 0:
			return appendRecord(nil, num, uint8(kvindex.TierGPU), -1, ep)
		case 1:
			return appendRecord(nil, num, uint8(kvindex.TierCPU), 1, ep)
		case 2:
			return appendRecord(nil, num, kindSpec, 0, 1<<40)
		case 3:
			return appendRecord(nil, num, uint8(kvindex.TierGPU), 1, ep-1) // an older epoch's
		default:
			return appendRecord(nil, num, uint8(kvindex.TierGPU), 1, ep)
		}
	}
	summary := func() []byte {
		var nums []uint32
		for num := uint32(1); num <= 9; num++ {
			if (num <= 5 || num == 9) && rng.IntN(2) == 0 {
				nums = append(nums, num)
			}
		}
		s := summaryOf([]uint64{30, 60}[rng.IntN(2)], nums)
		if rng.IntN(8) == 0 && len(s) > recordSize {
			s[len(s)-1] = 0x80 // a truncated varint in the padding: of no known shape
		}
		return s
	}
	count := func(vals [][]byte) []kvindex.PodMatch {
		sc := &matchScratch{bigNum: map[uint32]int32{}, byName: map[string]int32{}}
		sc.names, sc.tab, sc.arena = names, spans, slices.Clone(table)
		for i := range names {
			sc.cand = append(sc.cand, i)
		}
		for _, v := range vals {
			sc.vals = append(sc.vals, span{off: int32(len(sc.arena)), n: int32(len(v))})
			sc.arena = append(sc.arena, v...)
		}
		if !x.readTable(sc) {
			t.Fatal("table refused")
		}
		out := make([]kvindex.PodMatch, len(names))
		x.count(sc, make([]uint64, len(vals)), out)
		return out
	}
	long := 0
	for n := range 3000 {
		var vals, expanded [][]byte
		for range 1 + rng.IntN(4) {
			var v []byte
			summaries := 0
			for range rng.IntN(6) {
				if rng.IntN(3) == 0 {
					v, summaries = append(v, summary()...), summaries+1
				} else {
					v = append(v, record()...)
				}
			}
			if summaries > 1 {
				long++
			}
			vals, expanded = append(vals, v), append(expanded, expand(v, tab))
		}
		if got, want := count(vals), count(expanded); !slices.Equal(got, want) {
			t.Fatalf("case %d: Match over %x = %+v; over its summaries as records %+v", n, vals, got, want)
		}
	}
	if long == 0 {
		t.Fatal("no block held two summaries: the long way went untried")
	}
}
