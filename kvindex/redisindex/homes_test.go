package redisindex

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
)

// fakeHomes is a router's homes: changed and grown are handed out once;
// adopted and until record the last AdoptHomes, tails every tail adopted.
type fakeHomes struct {
	mu      sync.Mutex
	changed []replica.Home
	grown   []replica.HomeTail
	adopted []replica.Home
	tails   []replica.HomeTail
	peers   map[string]int64
	until   time.Time
	adopts  int
	// inFlight is what HomesInFlight reports for namespace m.
	inFlight int64
}

func (f *fakeHomes) HomesChanged(dst []replica.Home, tails []replica.HomeTail) ([]replica.Home, []replica.HomeTail) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dst, tails = append(dst, f.changed...), append(tails, f.grown...)
	f.changed, f.grown = nil, nil
	return dst, tails
}

func (f *fakeHomes) HomesInFlight(namespace string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if namespace != "m" {
		return -1
	}
	return f.inFlight
}

func (f *fakeHomes) AdoptHomes(homes []replica.Home, tails []replica.HomeTail, peers map[string]int64, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adopted, f.until, f.peers = append([]replica.Home(nil), homes...), until, peers
	f.tails = append(f.tails, tails...)
	f.adopts++
}

// TestHomesShared: a tick writes a replica's changed homes, by pod name,
// and its requests in flight, and hands every replica's homes back, by
// this replica's pod handles, with the other replicas' requests in
// flight, to its router, the sharing lasting a lease TTL; the last writer
// of a prefix wins; a field past its until is deleted, and hostile fields
// are refused without marking Redis down.
func TestHomesShared(t *testing.T) {
	srv := redisserver.New(t)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func(c *Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	}
	a, b := newReplica(t, srv.Addr, "a", clock), newReplica(t, srv.Addr, "b", clock)
	ha, hb := &fakeHomes{inFlight: 3}, &fakeHomes{inFlight: 5}
	a.ShareHomes(ha)
	b.ShareHomes(hb)
	until := now.Add(time.Minute).UnixNano()
	ha.changed = []replica.Home{
		{Namespace: "m", Block: 0xabc, Pod: a.pods["p1"], Tokens: 12000, Until: until},
		{Namespace: "m", Block: 0xdef, Pod: a.pods["p2"], Tokens: 500, Until: until},
	}
	a.tick()
	if len(ha.adopted) != 2 || !ha.until.Equal(now.Add(DefaultConfig().LeaseTTL)) || len(ha.peers) != 0 {
		t.Fatalf("a adopted %+v until %v, peers %v; want its own two back, for a lease TTL, and no other replica", ha.adopted, ha.until, ha.peers)
	}
	hb.changed = []replica.Home{{Namespace: "m", Block: 0xdef, Pod: b.pods["p1"], Tokens: 700, Until: until}}
	b.tick()
	got := map[uint64]replica.Home{}
	for _, h := range hb.adopted {
		got[h.Block] = h
	}
	if len(got) != 2 || got[0xabc] != (replica.Home{Namespace: "m", Block: 0xabc, Pod: b.pods["p1"], Tokens: 12000, Until: until}) ||
		got[0xdef].Pod != b.pods["p1"] || got[0xdef].Tokens != 700 {
		t.Fatalf("b adopted %+v, want a's 0xabc on p1 and its own 0xdef, written last, on p1", hb.adopted)
	}
	if len(hb.peers) != 1 || hb.peers["m"] != 3 {
		t.Fatalf("b's peers = %v, want a's 3 requests in flight on m", hb.peers)
	}

	rdb, ctx, key := keyWithTTL(t, srv, a.homeTableKey(nsTag("m")))
	refused := func() float64 { return testutil.ToFloat64(a.metrics.refused.WithLabelValues("homes")) }
	before := refused()
	must(t, rdb.HSet(ctx, key, "zz", "1:99999999999999:p1", "1", "x:1:p1", "2", "1:99999999999999:", "3", "1:99999999999999:nobody", "@c", "lots").Err())
	mu.Lock()
	now = now.Add(2 * time.Minute) // past both homes' until
	mu.Unlock()
	a.tick()
	if len(ha.adopted) != 0 || len(ha.peers) != 0 {
		t.Errorf("a adopted %+v, peers %v; want nothing: lapsed (b's requests too), hostile, or on no pod of its own", ha.adopted, ha.peers)
	}
	if after := refused(); after != before+4 {
		t.Errorf("refused{reason=homes} = %v, want %v", after, before+4)
	}
	if n, err := rdb.HLen(ctx, key).Result(); err != nil || n != 6 {
		t.Errorf("home table fields = %d, %v; want the 5 written by hand and a's requests (the lapsed deleted)", n, err)
	}
	if up, _ := a.Up(); !up {
		t.Error("hostile home fields marked Redis down")
	}
	must(t, rdb.Del(ctx, key).Err())
	must(t, rdb.Set(ctx, key, "x", 0).Err())
	before = refused()
	a.tick()
	if refused() != before+1 || ha.adopts != 3 {
		t.Errorf("a home table of the wrong type: refused %v → %v, adopts %d; want it refused, the rest shared", before, refused(), ha.adopts)
	}
}

// TestHomeTailsShared: the prompts that grew a replica's footprints reach
// the other replicas once each, in order, and never the writer; a new
// replica reads the stream from its start; hostile entries are refused.
func TestHomeTailsShared(t *testing.T) {
	srv, a, b, ha, hb := sharingReplicas(t)
	tail := func(block uint64, n int, sig ...uint64) replica.HomeTail {
		return replica.HomeTail{Namespace: "m", Block: block, Blocks: n, BlockSize: 16, Signature: sig}
	}
	ha.grown = []replica.HomeTail{tail(0xabc, 40, 1, 2, 3), tail(0xabc, 1, 1<<63|5)}
	a.tick()
	b.tick()
	if len(ha.tails) != 0 {
		t.Errorf("a adopted its own tails: %+v", ha.tails)
	}
	if len(hb.tails) != 2 || !reflect.DeepEqual(hb.tails[0], tail(0xabc, 40, 1, 2, 3)) {
		t.Fatalf("b adopted %+v, want a's two tails", hb.tails)
	}
	if !reflect.DeepEqual(hb.tails[1], tail(0xabc, 1, 1<<63|5)) {
		t.Errorf("b's second tail = %+v, want a's second", hb.tails[1])
	}
	entries := func(r *replicaIndex, kind, dir string) float64 {
		return testutil.ToFloat64(r.metrics.homeEntries.WithLabelValues(kind, dir))
	}
	if w, r, own := entries(a, "tail", "written"), entries(b, "tail", "read"), entries(a, "tail", "read"); w != 2 || r != 2 || own != 0 {
		t.Errorf("home_entries_total: a wrote %v tails, b read %v, a read %v; want 2, 2 and 0 (not its own)", w, r, own)
	}
	ha.grown = []replica.HomeTail{tail(0xdef, 16, 7)}
	a.tick()
	b.tick()
	if len(hb.tails) != 3 || hb.tails[2].Block != 0xdef {
		t.Fatalf("b adopted %+v, want a's third tail once more, and the first two not again", hb.tails)
	}
	c := newReplica(t, srv.Addr, "c", nil)
	hc := &fakeHomes{}
	c.ShareHomes(hc)
	c.tick()
	if len(hc.tails) != 3 {
		t.Errorf("a new replica adopted %d tails, want the stream's 3", len(hc.tails))
	}

	rdb, ctx, key := keyWithTTL(t, srv, a.homeStreamKey(nsTag("m")))
	refused := func() float64 { return testutil.ToFloat64(b.metrics.refused.WithLabelValues("homes")) }
	before := refused()
	for _, v := range [][]any{
		{"r", "x", "k", "zz", "n", "1", "b", "16", "s", "12345678"},
		{"r", "x", "k", "1", "n", "0", "b", "16", "s", "12345678"},
		{"r", "x", "k", "1", "n", "1", "b", "16", "s", "1234567"},
		{"r", "x", "k", "1", "n", "1", "b", "16", "s", "1234567812345678"},
	} {
		must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: v}).Err())
	}
	b.tick()
	if after := refused(); after != before+4 || len(hb.tails) != 3 {
		t.Errorf("hostile tails: refused %v → %v, tails %d; want 4 refused, none adopted", before, after, len(hb.tails))
	}
	if up, _ := b.Up(); !up {
		t.Error("hostile tails marked Redis down")
	}
}

// TestHomesSharedThroughTheStream: between lease ticks, a sync reads the
// homes the other replicas wrote since the last from the stream, the
// latest of each prefix, so that two replicas that homed one prefix at
// once both end with the later; a malformed home entry is refused.
func TestHomesSharedThroughTheStream(t *testing.T) {
	srv, a, b, ha, hb := sharingReplicas(t)
	a.tick()
	b.tick()
	until := time.Now().Add(time.Minute).UnixNano()
	home := func(block uint64, pod kvindex.PodID) replica.Home {
		return replica.Home{Namespace: "m", Block: block, Pod: pod, Tokens: 100, Until: until / 1e6 * 1e6}
	}
	ha.changed = []replica.Home{home(1, a.pods["p1"])}
	a.SyncHomes()
	b.SyncHomes()
	if !reflect.DeepEqual(hb.adopted, []replica.Home{home(1, b.pods["p1"])}) {
		t.Fatalf("b adopted %+v, want a's prefix 1 on p1", hb.adopted)
	}
	if w, r := testutil.ToFloat64(a.metrics.homesWritten), testutil.ToFloat64(b.metrics.homesRead); w != 1 || r != 1 {
		t.Errorf("home_entries_total{kind=home}: a wrote %v, b read %v; want 1 each", w, r)
	}
	ha.changed = []replica.Home{home(2, a.pods["p1"])}
	hb.changed = []replica.Home{home(2, b.pods["p2"])}
	a.SyncHomes() // writes p1
	b.SyncHomes() // writes p2, the later, and reads a's p1 before its own
	if len(hb.adopted) != 0 {
		t.Errorf("b adopted %+v, want nothing: its own home of prefix 2 is the later", hb.adopted)
	}
	a.SyncHomes()
	if !reflect.DeepEqual(ha.adopted, []replica.Home{home(2, a.pods["p2"])}) {
		t.Errorf("a adopted %+v, want b's later home of prefix 2, on p2", ha.adopted)
	}

	rdb, ctx, _ := keyWithTTL(t, srv, a.homeStreamKey(nsTag("m")))
	refused := func() float64 { return testutil.ToFloat64(b.metrics.refused.WithLabelValues("homes")) }
	before := refused()
	for _, v := range [][]any{
		{"r", "x", "k", "3", "p", "p1", "t", "-1", "u", "99999999999999"},
		{"r", "x", "k", "3", "p", "p1", "t", "1"},
		{"r", "x", "k", "zz", "p", "p1", "t", "1", "u", "99999999999999"},
	} {
		must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: a.homeStreamKey(nsTag("m")), Values: v}).Err())
	}
	b.SyncHomes()
	if after := refused(); after != before+3 || len(hb.adopted) != 0 {
		t.Errorf("malformed homes: refused %v → %v, adopted %+v; want 3 refused, none adopted", before, after, hb.adopted)
	}
}

// TestHomeSyncsBehind: a sync that reads a stream's most entries counts
// as behind, and the next reads on from where it stopped.
func TestHomeSyncsBehind(t *testing.T) {
	srv, a, b, _, hb := sharingReplicas(t)
	a.tick()
	b.tick()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range homeStreamRead + 10 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: a.homeStreamKey(nsTag("m")), Values: []any{"r", "x", "k", "1", "n", "1", "b", "16", "s", string(make([]byte, 8)), "i", i}})
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	b.SyncHomes()
	if got := testutil.ToFloat64(b.metrics.homesBehind); got != 1 || len(hb.tails) != homeStreamRead {
		t.Fatalf("home_syncs_behind_total = %v, tails %d; want 1 and %d", got, len(hb.tails), homeStreamRead)
	}
	b.SyncHomes()
	if got := testutil.ToFloat64(b.metrics.homesBehind); got != 1 || len(hb.tails) != homeStreamRead+10 {
		t.Errorf("home_syncs_behind_total = %v, tails %d; want still 1 and all %d", got, len(hb.tails), homeStreamRead+10)
	}
}

// keyWithTTL is a client of srv, closed when the test ends, after
// checking that key has a TTL.
func keyWithTTL(t *testing.T, srv *redisserver.Server, key string) (*redis.Client, context.Context, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
		t.Errorf("%s: TTL %v, %v; want one", key, ttl, err)
	}
	return rdb, ctx, key
}

// sharingReplicas is two replicas, a and b, over a new server, sharing
// the homes of fake routers ha and hb.
func sharingReplicas(t *testing.T) (srv *redisserver.Server, a, b *replicaIndex, ha, hb *fakeHomes) {
	t.Helper()
	srv = redisserver.New(t)
	a, b = newReplica(t, srv.Addr, "a", nil), newReplica(t, srv.Addr, "b", nil)
	ha, hb = &fakeHomes{}, &fakeHomes{}
	a.ShareHomes(ha)
	b.ShareHomes(hb)
	return srv, a, b, ha, hb
}
