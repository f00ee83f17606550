package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// holdFleet gives pods a and b caches of 100 tokens each whose requests
// lately found 90% of their prompts matched when routed, and none cached
// when admitted (no prefix-cache hits in their metrics), and routes two
// prompts of 40 tokens to each: 160 tokens queued on caches of 200, and
// each pod at Config.QueuePrefillsPerPod (2) requests awaiting their first
// token. It returns the decisions, a's first.
func holdFleet(t *testing.T, tr *testRouter) []*Decision {
	t.Helper()
	for _, p := range []string{"a", "b"} {
		tr.fleet.Load(p).KVCapacity.Store(100)
		tr.fleet.Load(p).FoldReuse(0.9, 1)
	}
	var ds []*Decision
	for i, to := range []string{"10.0.0.1:8000", "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.2:8000"} {
		d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%03d queued prompt of forty tokens, padded", i), ""), to)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return ds
}

// begin begins a request of prompt over pods a and b.
func (tr *testRouter) begin(prompt string) (*Decision, *Ticket) {
	tr.t.Helper()
	s, _ := ParseSubset([]string{"10.0.0.1:8000", "10.0.0.2:8000"})
	d, tk, err := tr.Begin(Request{ID: prompt, Path: "/v1/completions", Body: []byte(completion("llama", prompt, "")), Subset: s})
	if err != nil {
		tr.t.Fatal(err)
	}
	return d, tk
}

func ready(tk *Ticket) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
	}
}

// TestHoldPastTheCaches: once the prompts queued for a model's pods reach
// what their caches hold and every pod has its requests awaiting their
// first token, a request waits in the router; a pod that prefills one
// gets the waiting request that finds the most of its prompt cached there,
// the oldest first among equals.
func TestHoldPastTheCaches(t *testing.T) {
	tr := newTestRouter(t)
	ds := holdFleet(t, tr)
	tr.store("a", prompt, "", "")
	d, cold := tr.begin("a prompt that neither pod has cached, 48 tokens")
	if d != nil || cold == nil {
		t.Fatalf("Begin past the caches = %+v, %v; want a ticket", d, cold)
	}
	_, warm := tr.begin(prompt)
	_, other := tr.begin("another prompt that neither pod has, 48 tokens")
	if warm == nil || other == nil || ready(cold) || ready(warm) || ready(other) {
		t.Fatal("a request went to a pod without room")
	}
	if n := testutil.ToFloat64(tr.metrics.queued); n != 3 {
		t.Fatalf("queued_requests = %v, want 3", n)
	}
	ds[0].Prefilled() // a has room
	if !ready(warm) || ready(cold) || ready(other) {
		t.Fatalf("a prefilled: ready cold %v, warm %v, other %v; want the prompt a caches only", ready(cold), ready(warm), ready(other))
	}
	ds[0].Prefilled() // again: nothing more
	if ready(cold) {
		t.Fatal("a second Prefilled released another request to a")
	}
	tr.advance(1500 * time.Millisecond)
	dw, err := warm.Finish()
	if err != nil || dw.Pod != "a" || dw.Matched != 7 {
		t.Fatalf("warm routed to %+v, %v; want a with 7 blocks cached", dw, err)
	}
	if h := dw.AppendHeaders(nil); dw.Queued != 1500*time.Millisecond || !slices.Contains(h, [2]string{HeaderQueued, "1500"}) {
		t.Errorf("held 1.5 s: Queued %v, headers %q", dw.Queued, h)
	}
	if h := ds[0].AppendHeaders(nil); slices.ContainsFunc(h, func(kv [2]string) bool { return kv[0] == HeaderQueued }) {
		t.Errorf("a decision never held has headers %q", h)
	}
	ds[2].Prefilled() // b has room: the oldest of the two cold prompts
	if !ready(cold) || ready(other) {
		t.Fatalf("b prefilled: ready cold %v, other %v; want the older", ready(cold), ready(other))
	}
	dc, err := cold.Finish()
	if err != nil || dc.Pod != "b" {
		t.Fatalf("cold routed to %+v, %v; want b", dc, err)
	}
	if n := testutil.ToFloat64(tr.metrics.queued); n != 1 {
		t.Fatalf("queued_requests = %v, want 1", n)
	}
	if n := testutil.ToFloat64(tr.metrics.queueExits.WithLabelValues("released")); n != 2 {
		t.Fatalf("queue_exits_total{released} = %v, want 2", n)
	}
	if !other.Cancel() {
		t.Fatal("Cancel of a held request: not in the queue")
	}
	if n, res := tr.queue.n.Load(), len(tr.queue.reserved); n != 0 || res != 0 {
		t.Fatalf("after all: %d held, %d pods with reservations; want none", n, res)
	}
}

// TestHoldGateCloses: when the queued prompts fall below half of what the
// caches hold, the held requests are routed as usual, wherever their
// decision picks; with no room anywhere.
func TestHoldGateCloses(t *testing.T) {
	tr := newTestRouter(t)
	holdFleet(t, tr)
	long := prompt + " over the lazy dog, twice" // 55 tokens
	_, tk := tr.begin(long)
	if tk == nil {
		t.Fatal("not held")
	}
	tr.store("b", long, "", "")
	tr.fleet.Load("a").KVCapacity.Store(1000) // 200 tokens queued and held, of 1,100
	if tr.queue.open.Load() != 1 {
		t.Fatalf("%d gates open, want 1", tr.queue.open.Load())
	}
	tr.release()
	if !ready(tk) || tr.queue.open.Load() != 0 {
		t.Fatalf("the gate closed: ready %v, %d gates open; want the request gone and none open", ready(tk), tr.queue.open.Load())
	}
	d, err := tk.Finish()
	if err != nil || d.Pod != "b" {
		t.Fatalf("routed to %+v, %v; want b, which caches the prompt", d, err)
	}
	if p := tr.fleet.Load("b").Prefilling.Load(); p != 3 {
		t.Fatalf("b has %d requests awaiting their first token, want 3: the gate's release ignores room", p)
	}
}

// TestHoldNeedsEveryCapacity: with a pod's cache size unknown nothing is
// held, however long the queues.
func TestHoldNeedsEveryCapacity(t *testing.T) {
	tr := newTestRouter(t)
	holdFleet(t, tr)
	tr.fleet.Load("b").KVCapacity.Store(0)
	for i := range 4 {
		if d, tk := tr.begin(fmt.Sprintf("%03d more prompts, each of them some sixty tokens long", i)); d == nil || tk != nil {
			t.Fatalf("request %d held with b's capacity unknown", i)
		}
	}
}

// TestHoldNotWhileCachesHit: past the caches, a fleet whose pods' prefix
// caches hit as much of the prompts as routing found matched holds
// nothing: the queue evicts nothing the requests need. It holds once the
// hits fall below three quarters of the matched share.
func TestHoldNotWhileCachesHit(t *testing.T) {
	tr := newTestRouter(t)
	holdFleet(t, tr)
	at := time.Unix(1000, 0)
	for _, p := range []string{"a", "b"} {
		l := tr.fleet.Load(p)
		l.ObserveCache(at, fleet.Counters{Has: fleet.HasCacheQueries | fleet.HasCacheHits})
		l.ObserveCache(at.Add(time.Second), fleet.Counters{CacheQueries: 1000, CacheHits: 950, Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	}
	if d, tk := tr.begin("a prompt that neither pod has cached, 48 tokens"); d == nil || tk != nil {
		t.Fatal("held while the caches hit 95% and routing matched 90%")
	}
	tr.fleet.Load("b").ObserveCache(at.Add(2*time.Second), fleet.Counters{CacheQueries: 4000, CacheHits: 950, Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	if d, tk := tr.begin("another prompt that neither pod has, 48 tokens"); d != nil || tk == nil {
		t.Fatal("not held once the caches' hits fell below three quarters of what routing matched")
	}
}

// TestRouteWaitsForRoom: Route blocks while the request is held and
// returns the decision when a pod prefills; a client that goes away ends
// the wait with its context's error; the wait ends at HoldMaxWait.
func TestRouteWaitsForRoom(t *testing.T) {
	tr := newTestRouter(t)
	ds := holdFleet(t, tr)
	subset, _ := ParseSubset([]string{"10.0.0.1:8000", "10.0.0.2:8000"})
	route := func(ctx context.Context, id string) <-chan error {
		out := make(chan error, 1)
		go func() {
			d, err := tr.Route(ctx, Request{ID: id, Path: "/v1/completions", Body: []byte(completion("llama", id+" of the prompts, each forty tokens or more", "")), Subset: subset})
			if err == nil && d.Pod != "b" {
				err = fmt.Errorf("routed to %s, want b", d.Pod)
			}
			out <- err
		}()
		return out
	}
	waitHeld := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); tr.queue.n.Load() != n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests held, want %d", tr.queue.n.Load(), n)
			}
		}
	}
	first := route(context.Background(), "first")
	waitHeld(1)
	ds[2].Prefilled()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := route(ctx, "gone")
	waitHeld(1)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Route of a request whose client left = %v, want context.Canceled", err)
	}
	if n := testutil.ToFloat64(tr.metrics.queueExits.WithLabelValues("canceled")); n != 1 {
		t.Fatalf("queue_exits_total{canceled} = %v, want 1", n)
	}
	tr.cfg.QueueMaxWait = 20 * time.Millisecond
	late := make(chan *Decision, 1)
	go func() {
		d, err := tr.Route(context.Background(), Request{ID: "late", Path: "/v1/completions", Body: []byte(completion("llama", "late, and forty tokens long, or a little more", "")), Subset: subset})
		if err != nil {
			t.Error(err)
		}
		late <- d
	}()
	if d := <-late; d == nil || d.Pod != "a" && d.Pod != "b" {
		t.Fatalf("expired request routed to %+v", d)
	}
	if n := testutil.ToFloat64(tr.metrics.queueExits.WithLabelValues("expired")); n != 1 {
		t.Fatalf("queue_exits_total{expired} = %v, want 1", n)
	}
}

// slowIndex is an Index whose Match, once armed, signals entered and
// waits for proceed: a round trip to a remote index.
type slowIndex struct {
	Index
	armed            bool
	entered, proceed chan struct{}
}

func (x *slowIndex) Match(ns string, hashes []uint64, c []kvindex.PodID, out []kvindex.PodMatch) []kvindex.PodMatch {
	if x.armed {
		x.entered <- struct{}{}
		<-x.proceed
	}
	return x.Index.Match(ns, hashes, c, out)
}

// TestQueueMatchesWithoutItsLock: while a pod with room is matched against
// the waiting requests (a round trip each with the redis index), the
// queue's lock, which every request takes while the queue is open, is
// free: a request is queued meanwhile, and the release that follows
// gives the waiting request the pod caches to it.
func TestQueueMatchesWithoutItsLock(t *testing.T) {
	tr := newTestRouter(t)
	slow := &slowIndex{Index: tr.Router.index, entered: make(chan struct{}), proceed: make(chan struct{})}
	tr.Router.index = slow
	ds := holdFleet(t, tr)
	tr.store("a", prompt, "", "")
	_, cold := tr.begin("a prompt that neither pod has cached, 48 tokens")
	_, warm := tr.begin(prompt)
	if cold == nil || warm == nil {
		t.Fatal("Begin past the caches routed at once; want tickets")
	}
	slow.armed = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		ds[0].Prefilled() // a has room: release matches the index
	}()
	<-slow.entered
	if !tr.queue.mu.TryLock() {
		t.Fatal("the queue's lock is held while the index is matched")
	}
	tr.queue.mu.Unlock()
	slow.armed = false
	_, other := tr.begin("another prompt that neither pod has, 48 tokens")
	if other == nil {
		t.Fatal("a request while the index was matched was routed at once; want it queued")
	}
	close(slow.proceed)
	<-done
	if !ready(warm) || ready(cold) || ready(other) {
		t.Fatalf("after the release: ready warm %v, cold %v, other %v; want the prompt a caches only", ready(warm), ready(cold), ready(other))
	}
}

// TestDrainRoutesHeldRequests: once kvrouter starts to stop, every request
// it holds is routed at once (none waits out routing.queue_max_wait past
// the servers' shutdown), and no later request is held.
func TestDrainRoutesHeldRequests(t *testing.T) {
	tr := newTestRouter(t)
	holdFleet(t, tr)
	var held []*Ticket
	for i := range 3 {
		if d, tk := tr.begin(fmt.Sprintf("prompt %d that neither pod has cached, 48 tokens", i)); d != nil || tk == nil {
			t.Fatalf("Begin past the caches = %+v, %v; want a ticket", d, tk)
		} else {
			held = append(held, tk)
		}
	}
	tr.Drain()
	for i, tk := range held {
		if !ready(tk) {
			t.Fatalf("held request %d not released by Drain", i)
		}
		if d, err := tk.Finish(); err != nil || d.Pod == "" {
			t.Fatalf("held request %d after Drain = %+v, %v; want routed", i, d, err)
		}
	}
	if d, tk := tr.begin("a prompt after the drain began, 48 tokens long"); d == nil || tk != nil {
		t.Fatalf("Begin after Drain = %+v, %v; want a decision at once", d, tk)
	}
	if n := testutil.ToFloat64(tr.metrics.queueExits.WithLabelValues("drained")); n != 3 {
		t.Errorf("queue_exits_total{drained} = %v, want 3", n)
	}
	if n := tr.queue.n.Load(); n != 0 {
		t.Errorf("%d requests still held", n)
	}
}
