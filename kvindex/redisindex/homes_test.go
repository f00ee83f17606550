package redisindex

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
)

// fakeHomes is a router's homes: changed are handed out once; adopted
// and until record the last AdoptHomes.
type fakeHomes struct {
	mu      sync.Mutex
	changed []kvindex.Home
	adopted []kvindex.Home
	until   time.Time
	adopts  int
}

func (f *fakeHomes) HomesChanged(dst []kvindex.Home) []kvindex.Home {
	f.mu.Lock()
	defer f.mu.Unlock()
	dst = append(dst, f.changed...)
	f.changed = nil
	return dst
}

func (f *fakeHomes) AdoptHomes(homes []kvindex.Home, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adopted, f.until = append([]kvindex.Home(nil), homes...), until
	f.adopts++
}

// TestHomesShared: a tick writes a replica's changed homes, by pod name,
// and hands every replica's back, by this replica's pod handles, to its
// router, the sharing lasting a lease TTL; the last writer of a prefix
// wins; a field past its until is deleted, and hostile fields are refused
// without marking Redis down.
func TestHomesShared(t *testing.T) {
	srv := redisserver.New(t)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func(c *Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	}
	a, b := newReplica(t, srv.Addr, "a", clock), newReplica(t, srv.Addr, "b", clock)
	ha, hb := &fakeHomes{}, &fakeHomes{}
	a.ShareHomes(ha)
	b.ShareHomes(hb)
	until := now.Add(time.Minute).UnixNano()
	ha.changed = []kvindex.Home{
		{Namespace: "m", Block: 0xabc, Pod: a.pods["p1"], Tokens: 12000, Until: until},
		{Namespace: "m", Block: 0xdef, Pod: a.pods["p2"], Tokens: 500, Until: until},
	}
	a.tick()
	if len(ha.adopted) != 2 || !ha.until.Equal(now.Add(DefaultConfig().LeaseTTL)) {
		t.Fatalf("a adopted %+v until %v, want its own two back, for a lease TTL", ha.adopted, ha.until)
	}
	hb.changed = []kvindex.Home{{Namespace: "m", Block: 0xdef, Pod: b.pods["p1"], Tokens: 700, Until: until}}
	b.tick()
	got := map[uint64]kvindex.Home{}
	for _, h := range hb.adopted {
		got[h.Block] = h
	}
	if len(got) != 2 || got[0xabc] != (kvindex.Home{Namespace: "m", Block: 0xabc, Pod: b.pods["p1"], Tokens: 12000, Until: until}) ||
		got[0xdef].Pod != b.pods["p1"] || got[0xdef].Tokens != 700 {
		t.Fatalf("b adopted %+v, want a's 0xabc on p1 and its own 0xdef, written last, on p1", hb.adopted)
	}

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	key := a.homeTableKey(nsTag("m"))
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 {
		t.Errorf("home table TTL = %v, %v; want one", ttl, err)
	}
	refused := func() float64 { return testutil.ToFloat64(a.metrics.refused.WithLabelValues("homes")) }
	before := refused()
	must(t, rdb.HSet(ctx, key, "zz", "1:99999999999999:p1", "1", "x:1:p1", "2", "1:99999999999999:", "3", "1:99999999999999:nobody").Err())
	mu.Lock()
	now = now.Add(2 * time.Minute) // past both homes' until
	mu.Unlock()
	a.tick()
	if len(ha.adopted) != 0 {
		t.Errorf("a adopted %+v, want nothing: lapsed, hostile, or on no pod of its own", ha.adopted)
	}
	if after := refused(); after != before+3 {
		t.Errorf("refused{reason=homes} = %v, want %v", after, before+3)
	}
	if n, err := rdb.HLen(ctx, key).Result(); err != nil || n != 4 {
		t.Errorf("home table fields = %d, %v; want the 4 written by hand (the lapsed deleted)", n, err)
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
