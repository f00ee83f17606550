package redisindex

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// byteTokens tokenizes a prompt as its bytes.
type byteTokens struct{}

func (byteTokens) AppendTokens(dst []uint32, _ string, p *router.Parsed) ([]uint32, error) {
	for i := range len(p.Prompt) {
		dst = append(dst, uint32(p.Prompt[i]))
	}
	return dst, nil
}

// routerReplica is one kvrouter replica: a router over a fleet over the
// shared index.
type routerReplica struct {
	*router.Router
	index *Index
	fleet *fleet.Fleet
	reg   *prometheus.Registry // the router's metrics
}

func newRouterReplica(t *testing.T, addr, name string, mutate func(*Config)) *routerReplica {
	t.Helper()
	r := newReplica(t, addr, name, mutate)
	fl := fleet.New(r.Index)
	for i, p := range []string{"p1", "p2", "p3"} {
		fl.Upsert(pod.Pod{Name: p, IP: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Model: "m", Ready: true})
	}
	hasher, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256, Seed: "vllm-none-hash", BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.DefaultConfig(), fl, r.Index, hasher, byteTokens{}, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	r.ShareHomes(rt)
	return &routerReplica{Router: rt, index: r.Index, fleet: fl, reg: reg}
}

func (r *routerReplica) route(t *testing.T, prompt string) *router.Decision {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":%q}`, prompt)
	d, err := r.Route(context.Background(), router.Request{ID: "req", Path: "/v1/completions", Body: []byte(body)})
	if err != nil {
		t.Fatalf("Route(%q) = %v, want a decision", prompt, err)
	}
	return d
}

// TestRoutersShareSpeculation: a burst of requests sharing a new prefix,
// split over two replicas, goes to one pod: each replica sees the other's
// decision. The in-flight load is not shared here (it weighs the pod's
// queue against the prefill elsewhere: TestRoutersShareInFlightLoad).
func TestRoutersShareSpeculation(t *testing.T) {
	srv := redisserver.New(t)
	private := func(c *Config) { c.NoSharedLoad = true }
	a, b := newRouterReplica(t, srv.Addr, "a", private), newRouterReplica(t, srv.Addr, "b", private)
	a.index.tick()
	b.index.tick() // b learns the pods' numbers
	for i := range 8 {
		prompt := fmt.Sprintf("request %d: a long shared system prompt", i)
		da := a.route(t, prompt)
		db := b.route(t, prompt)
		if db.Pod != da.Pod || db.Matched != db.Total || db.Reason != router.ReasonPrefix {
			t.Errorf("prompt %d: replica a sent it to %s; replica b to %s (%d/%d blocks, %s), want %s with every block",
				i, da.Pod, db.Pod, db.Matched, db.Total, db.Reason, da.Pod)
		}
		da.Done()
		db.Done()
	}
}

// TestRoutersShareInFlightLoad: a replica sees the prefill the other
// routed and has not seen done as its own, and sends a request elsewhere
// that it would have sent to that pod, until the prefill is done.
func TestRoutersShareInFlightLoad(t *testing.T) {
	srv := redisserver.New(t)
	a, b := newRouterReplica(t, srv.Addr, "a", nil), newRouterReplica(t, srv.Addr, "b", nil)
	a.index.tick()
	b.index.tick()
	long := strings.Repeat("an uncached prompt, long to prefill. ", 200)
	da := a.route(t, long)
	id, ok := b.index.local.Pod(da.Pod)
	if !ok {
		t.Fatalf("pod %s unknown to b", da.Pod)
	}
	_, peers := b.index.MatchLoad("m", blocks[:1], []kvindex.PodID{id}, nil, nil)
	if peers[0].Prefilling != 1 || peers[0].PrefillTokens < int64(len(long)) {
		t.Fatalf("b sees %+v on %s, want a's request and its %d tokens at least", peers[0], da.Pod, len(long))
	}
	aid, _ := a.index.local.Pod(da.Pod)
	if _, own := a.index.MatchLoad("m", blocks[:1], []kvindex.PodID{aid}, nil, nil); own[0] != (replica.PodLoad{}) {
		t.Errorf("a sees %+v of its own load through Redis, want none (its fleet.Load has it)", own[0])
	}
	// A short request with nothing cached anywhere: b avoids a's queue.
	for i := range 4 {
		if db := b.route(t, fmt.Sprintf("short %d", i)); db.Pod == da.Pod {
			t.Errorf("short request %d: b sent it to %s, behind a's long prefill", i, db.Pod)
		} else {
			db.Done()
		}
	}
	da.Prefilled()
	if _, peers = b.index.MatchLoad("m", blocks[:1], []kvindex.PodID{id}, nil, nil); peers[0] != (replica.PodLoad{}) {
		t.Errorf("after a's prefill b sees %+v on %s, want none", peers[0], da.Pod)
	}
	da.Done()
}

// TestRoutersUnderRun: two replicas running as kvrouter runs them (group
// writer, load writer, leases) route concurrently; their speculation and
// in-flight prefill reach each other without the decisions waiting, and
// the shared load drains to nothing once every request is done.
func TestRoutersUnderRun(t *testing.T) {
	srv := redisserver.New(t)
	a, b := newRouterReplica(t, srv.Addr, "a", nil), newRouterReplica(t, srv.Addr, "b", nil)
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	for _, r := range []*routerReplica{a, b} {
		run.Add(1)
		go func() { defer run.Done(); _ = r.index.Run(ctx) }()
	}
	defer func() { cancel(); run.Wait() }()
	waitFor(t, "the leases taken", 20*time.Second, func() bool {
		return testutil.ToFloat64(a.index.metrics.leases)+testutil.ToFloat64(b.index.metrics.leases) == 3 &&
			a.index.grouping.Load() && b.index.grouping.Load()
	})
	waitFor(t, "the pods numbered", 20*time.Second, func() bool {
		for _, r := range []*routerReplica{a, b} {
			for _, ps := range r.index.pods.byID {
				if ps.num.Load() == 0 {
					r.index.Renew()
					return false
				}
			}
		}
		return true
	})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				r := []*routerReplica{a, b}[(g+i)%2]
				d, err := r.Route(context.Background(), router.Request{
					ID: "req", Path: "/v1/completions",
					Body: []byte(fmt.Sprintf(`{"model":"m","prompt":"group %d: a shared prefix, then question %d"}`, g, i)),
				})
				if err != nil {
					t.Error(err)
					return
				}
				d.Prefilled()
				d.Done()
			}
		}()
	}
	wg.Wait()
	prompt := "a new prefix nobody has routed yet, long enough for several blocks"
	da := a.route(t, prompt)
	waitFor(t, "b seeing a's speculation and in-flight prefill", 20*time.Second, func() bool {
		id, _ := b.index.local.Pod(da.Pod)
		_, peers := b.index.MatchLoad("m", []uint64{1}, []kvindex.PodID{id}, nil, nil)
		return peers[0].Prefilling == 1
	})
	hasher, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256, Seed: "vllm-none-hash", BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, len(prompt))
	for i := range len(prompt) {
		tokens[i] = uint32(prompt[i])
	}
	hashes := hasher.AppendHashes(nil, tokens, blockhash.Extra{})
	id, _ := b.index.local.Pod(da.Pod)
	waitFor(t, "b seeing a's speculation", 20*time.Second, func() bool {
		return b.index.Match("m", hashes, []kvindex.PodID{id}, nil)[0].Speculative == len(hashes)
	})
	da.Prefilled() // the load released; the speculation lasts the grace period
	waitFor(t, "b seeing a's prefill done", 20*time.Second, func() bool {
		_, peers := b.index.MatchLoad("m", hashes, []kvindex.PodID{id}, nil, nil)
		return peers[0] == (replica.PodLoad{})
	})
	if db := b.route(t, prompt); db.Pod != da.Pod || db.Matched != db.Total {
		t.Errorf("b routed a's prompt to %s with %d of %d blocks, want %s with all", db.Pod, db.Matched, db.Total, da.Pod)
	} else {
		db.Done()
	}
	da.Done()
	waitFor(t, "the shared load drained", 20*time.Second, func() bool {
		for _, r := range []*routerReplica{a, b} {
			var ids []kvindex.PodID
			for id := range r.index.pods.byID {
				ids = append(ids, id)
			}
			_, peers := r.index.MatchLoad("m", []uint64{1}, ids, nil, nil)
			for _, p := range peers {
				if p != (replica.PodLoad{}) {
					return false
				}
			}
		}
		return true
	})
}

// TestRoutersRideOutAnOutage: with Redis gone for a while under load, no
// request fails and the replica routes on its own view; then it matches
// through Redis again by itself.
func TestRoutersRideOutAnOutage(t *testing.T) {
	srv := redisserver.New(t)
	quick := func(c *Config) { c.PingInterval = 100 * time.Millisecond; c.LeaseTTL = 900 * time.Millisecond }
	a := newRouterReplica(t, srv.Addr, "a", quick)
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Add(1)
	go func() { defer run.Done(); _ = a.index.Run(ctx) }()
	defer func() { cancel(); run.Wait() }()
	waitFor(t, "the leases taken", 20*time.Second, func() bool { return testutil.ToFloat64(a.index.metrics.leases) == 3 })

	outage := 10 * time.Second
	if testing.Short() {
		outage = 2 * time.Second
	}
	srv.Stop()
	end := time.Now().Add(outage)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				body := fmt.Sprintf(`{"model":"m","prompt":"worker %d request %d with some words"}`, w, i%5)
				d, err := a.Route(context.Background(), router.Request{ID: "req", Path: "/v1/completions", Body: []byte(body)})
				if err != nil {
					errs <- err
					return
				}
				d.Done()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a request during the outage: %v", err)
	}
	if got := testutil.ToFloat64(a.index.metrics.localMatches); got == 0 {
		t.Error("no match read the local view during the outage")
	}
	srv.Start()
	waitFor(t, "Redis marked up again", 20*time.Second, func() bool { up, _ := a.index.Up(); return up })
	local := testutil.ToFloat64(a.index.metrics.localMatches)
	a.route(t, "after the outage").Done()
	if got := testutil.ToFloat64(a.index.metrics.localMatches); got != local {
		t.Errorf("after recovery a match read the local view (%v → %v)", local, got)
	}
}

// The router finds the shared load through this interface.
var _ router.LoadSharer = (*Index)(nil)

// TestRoutersShareHomes: a prefix one replica homed is homed on the same
// pod by the other once each has ticked, though that replica never saw
// it; with NoSharedHomes it is not.
func TestRoutersShareHomes(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			srv := redisserver.New(t)
			a, b := homeReplicas(t, srv.Addr, func(c *Config) { c.NoSharedHomes = !shared })
			system := strings.Repeat("a group's long system prompt. ", 40)
			home := a.homePrefix(t, system)
			a.index.tick() // writes the home
			b.index.tick() // reads it
			body := fmt.Sprintf(`{"model":"m","prompt":%q}`, system+"question 9?")
			rep, err := b.Score(router.Request{Path: "/v1/completions", Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case shared && (rep.Home == nil || rep.Home.Pod != home || rep.Home.Tokens < int64(len(system))):
				t.Fatalf("b's home of the prefix = %+v, want a's: %s, with its footprint", rep.Home, home)
			case !shared && rep.Home != nil:
				t.Fatalf("homes not shared: b's home of the prefix = %+v, want none", rep.Home)
			}
		})
	}
}

// homeReplicas are two router replicas a and b (config mutate) over the
// server at addr, their pods' KV capacity known and the leases taken; a
// has routed 30 one-off prompts, so that no group of prompts carries more
// than a pod's share of its requests.
func homeReplicas(t *testing.T, addr string, mutate func(*Config)) (a, b *routerReplica) {
	t.Helper()
	a, b = newRouterReplica(t, addr, "a", mutate), newRouterReplica(t, addr, "b", mutate)
	for _, r := range []*routerReplica{a, b} {
		for _, p := range []string{"p1", "p2", "p3"} {
			r.fleet.Load(p).KVCapacity.Store(1 << 20)
		}
		r.index.tick()
	}
	for i := range 30 {
		d := a.route(t, fmt.Sprintf("%04d", i))
		d.Prefilled()
		d.Done()
	}
	return a, b
}

// homePrefix routes two prompts starting with system through r, the
// second of which homes their prefix, and returns the pod they went to.
func (r *routerReplica) homePrefix(t *testing.T, system string) string {
	t.Helper()
	var pod string
	for i := range 2 {
		d := r.route(t, fmt.Sprintf("%squestion %d?", system, i))
		pod = d.Pod
		d.Prefilled()
		d.Done()
	}
	return pod
}

// homesShared reads the replica's kvrouter_router_homes_shared.
func (r *routerReplica) homesShared(t *testing.T) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kvrouter_router_homes_shared" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no kvrouter_router_homes_shared")
	return 0
}

// homeOf is the pod replica r homes prompt's prefix on; "" for none.
func (r *routerReplica) homeOf(t *testing.T, prompt string) string {
	t.Helper()
	rep, err := r.Score(router.Request{Path: "/v1/completions", Body: []byte(fmt.Sprintf(`{"model":"m","prompt":%q}`, prompt))})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Home == nil {
		return ""
	}
	return rep.Home.Pod
}

// TestRoutersShareHomesAcrossARestart: while Redis is down past the lease
// TTL the replicas stop sharing their homes (and keep their own); when it
// comes back empty, they share again: a prefix one homes after the
// restart reaches the other through the new stream, and the homes each
// held before the restart stay.
func TestRoutersShareHomesAcrossARestart(t *testing.T) {
	srv := redisserver.New(t)
	a, b := homeReplicas(t, srv.Addr, func(c *Config) { c.LeaseTTL = 600 * time.Millisecond })
	// Prefixes are keyed by their first block (4 bytes here).
	before := strings.Repeat("before the restart: a system prompt. ", 30)
	x := a.homePrefix(t, before)
	for _, r := range []*routerReplica{a, b} {
		r.index.tick() // the sharing lasts a lease TTL (600 ms) from here
		if got := r.homesShared(t); got != 1 {
			t.Fatalf("before the restart: homes_shared = %v, want 1", got)
		}
	}
	if got := b.homeOf(t, before+"q?"); got != x {
		t.Fatalf("before the restart: b homes the prefix on %q, want a's %q", got, x)
	}

	srv.Stop()
	time.Sleep(700 * time.Millisecond) // past the lease TTL
	for _, r := range []*routerReplica{a, b} {
		r.index.tick() // fails: Redis is down
		if got := r.homesShared(t); got != 0 {
			t.Errorf("Redis down past the lease TTL: homes_shared = %v, want 0", got)
		}
	}
	if got := b.homeOf(t, before+"q?"); got != x {
		t.Errorf("Redis down: b homes the prefix on %q, want its own %q still", got, x)
	}

	srv.Start() // empty: the table and the stream are gone
	for _, r := range []*routerReplica{a, b} {
		r.index.tick() // Redis is up again
		r.index.tick() // the leases taken again, the homes shared
		if got := r.homesShared(t); got != 1 {
			t.Errorf("after the restart: homes_shared = %v, want 1", got)
		}
	}
	after := strings.Repeat("after the restart: a system prompt. ", 30)
	y := a.homePrefix(t, after)
	if got := b.homeOf(t, after+"q?"); got != "" {
		t.Fatalf("b homes the new prefix on %q before any sync, want none: the prefixes share a key", got)
	}
	a.index.SyncHomes()
	b.index.SyncHomes()
	if got := b.homeOf(t, after+"q?"); got != y {
		t.Errorf("after the restart: b homes the new prefix on %q, want a's %q", got, y)
	}
	if got := b.homeOf(t, before+"q?"); got != x {
		t.Errorf("after the restart: b homes the old prefix on %q, want %q", got, x)
	}
}
