package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// TestQueueBeyondTheCacheExpiresMatches: once the prompts queued on a pod
// hold more tokens than its KV cache, the blocks it caches that no queued
// request uses are evicted before a new request's turn, and price as
// uncached; a prompt queued there keeps its blocks until a cache's worth
// of prompts is routed after it, counted by the share of their tokens the
// pod's prefix cache missed lately (all of them until its metrics show
// hits). An unknown capacity expires nothing.
func TestQueueBeyondTheCacheExpiresMatches(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.QueuePrefillsPerPod = 0          // the queue past the cache stays on the pod, as it does without the router's queue
	body := completion("llama", prompt, "") // 30 tokens, 7 full blocks
	tr.store("a", prompt, "", "")
	a := tr.fleet.Load("a")
	a.KVCapacity.Store(100)
	others := 0
	queue := func(n int) {
		t.Helper()
		for range n {
			others++
			other := fmt.Sprintf("%03d other prompt of forty tokens, queued", others) // 40 bytes
			if _, err := tr.route("/v1/completions", completion("llama", other, ""), "10.0.0.1:8000"); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when string, expiring int) {
		t.Helper()
		s, cold := tr.scoreOn(body, "a", when), tr.scoreOn(body, "c", when)
		if s.Matched != 7 || s.Expiring != expiring {
			t.Fatalf("%s: a matched %d blocks, %d expiring, want 7 and %d", when, s.Matched, s.Expiring, expiring)
		}
		if all := expiring == 7; all != (s.Prefill == cold.Prefill) {
			t.Errorf("%s: prefill on a %.3g s, on the cold c %.3g s: want them equal only when every matched block expires", when, s.Prefill, cold.Prefill)
		}
	}
	check("nothing queued", 0)
	queue(2) // 80 tokens queued: within the cache
	check("80 tokens queued", 0)
	queue(1)
	check("120 tokens queued", 7)
	d, err := tr.route("/v1/completions", body, "10.0.0.1:8000")
	if err != nil || d.Pod != "a" {
		t.Fatalf("routed to %v, %v; want a", d, err)
	}
	check("the prompt queued last", 0)
	queue(2)
	check("80 tokens routed after it", 0)
	queue(1)
	check("120 tokens routed after it", 7)
	at := time.Unix(1000, 0)
	a.ObserveCache(at, fleet.Counters{Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	a.ObserveCache(at.Add(time.Second), fleet.Counters{CacheQueries: 1000, CacheHits: 500, Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	if _, err := tr.route("/v1/completions", body, "10.0.0.1:8000"); err != nil {
		t.Fatal(err)
	}
	queue(4)
	check("160 tokens routed after it, half of them hits", 0)
	queue(1)
	check("200 tokens routed after it, half of them hits", 7)
	a.KVCapacity.Store(0)
	check("capacity unknown", 0)
}

// TestExpiringTailOffTheGPU: a pod whose GPU holds a prompt's head and its
// CPU tier the tail (an offloading connector keeps what the GPU evicts):
// past the cache's worth of allocations after a queued request that uses
// the head, the tail expires from the GPU's point of view, but blocks off
// the GPU are not what its eviction takes, and the head is fresh: nothing
// is priced as evicted. With the head unclaimed too, the GPU blocks expire.
func TestExpiringTailOffTheGPU(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.QueuePrefillsPerPod = 0 // the queue past the cache stays on the pod, as it does without the router's queue
	id, hs := tr.blocks("a", prompt, "", "")
	if err := tr.index.Stored(id, kvindex.TierGPU, hs[:3]); err != nil {
		t.Fatal(err)
	}
	if err := tr.index.Stored(id, kvindex.TierCPU, hs[3:]); err != nil {
		t.Fatal(err)
	}
	a := tr.fleet.Load("a")
	a.KVCapacity.Store(100)
	body := completion("llama", prompt, "")
	before := tr.scoreOn(body, "a", "nothing queued")
	head, err := tr.route("/v1/completions", completion("llama", prompt[:12]+" shares the head, forty bytes!", ""), "10.0.0.1:8000")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%03d other prompt of forty tokens, queued", i), ""), "10.0.0.1:8000"); err != nil {
			t.Fatal(err)
		}
	}
	if s := tr.scoreOn(body, "a", "head queued"); s.Expiring != 0 || s.Prefill != before.Prefill {
		t.Errorf("head queued: %d blocks expiring, prefill %.3g s (%.3g s before): want none, and the same", s.Expiring, s.Prefill, before.Prefill)
	}
	head.Prefilled()
	if _, err := tr.route("/v1/completions", completion("llama", "002 other prompt of forty tokens, queued", ""), "10.0.0.1:8000"); err != nil {
		t.Fatal(err)
	}
	if s := tr.scoreOn(body, "a", "head prefilled"); s.Expiring != 3 || s.Prefill <= before.Prefill {
		t.Errorf("head prefilled: %d blocks expiring, prefill %.3g s (%.3g s before): want the 3 on the GPU, and dearer", s.Expiring, s.Prefill, before.Prefill)
	}
}

// TestQueuedRoundTrip: the prompt tokens queued on a pod return to 0
// whatever a decision goes through: moves to fallbacks before and after
// its prefill, Done twice, a prefill hop; the clock only grows.
func TestQueuedRoundTrip(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.DestinationEndpoints = 3
	tr.store("b", prompt, "", "")
	d, err := tr.route("/v1/completions", completion("llama", prompt, ""))
	if err != nil {
		t.Fatal(err)
	}
	if q := tr.fleet.Load(d.Pod).Queued.Load(); q != 30 {
		t.Fatalf("%s: %d prompt tokens queued, want 30", d.Pod, q)
	}
	from := d.Pod
	if !d.Served(d.Fallbacks[0]) {
		t.Fatal("not moved to the first fallback")
	}
	if q, moved := tr.fleet.Load(from).Queued.Load(), tr.fleet.Load(d.Pod).Queued.Load(); q != 0 || moved != 30 {
		t.Fatalf("after the move: %s %d queued, %s %d; want 0 and 30", from, q, d.Pod, moved)
	}
	d.Served(d.Fallbacks[1])
	d.Prefilled()
	d.Served(d.Fallbacks[0]) // prefilled: nothing moves but the request
	d.Done()
	d.Done()
	for _, p := range []string{"a", "b", "c"} {
		if q := tr.fleet.Load(p).Queued.Load(); q != 0 {
			t.Errorf("%s: %d prompt tokens queued after Done, want 0", p, q)
		}
	}
	if c := tr.fleet.Load(from).Charged.Load(); c != 30*fleet.ChargedUnit {
		t.Errorf("%s: clock at %d, want the 30 tokens routed there", from, c)
	}
	tr.cfg.PDThresholdTokens = 8
	for _, p := range []pod.Pod{
		{Name: "p1", IP: "10.0.1.1", Port: 8000, Model: "pd", Role: pod.RolePrefill, Ready: true},
		{Name: "d1", IP: "10.0.2.1", Port: 8000, Model: "pd", Role: pod.RoleDecode, Ready: true},
	} {
		tr.fleet.Upsert(p)
	}
	d, err = tr.route("/v1/completions", completion("pd", prompt, ""))
	if err != nil || d.PrefillPod != "p1" {
		t.Fatalf("routed %+v, %v; want a hop through p1", d, err)
	}
	if q := tr.fleet.Load("p1").Queued.Load(); q != 30 {
		t.Errorf("p1: %d prompt tokens queued, want 30", q)
	}
	d.Done()
	for _, p := range []string{"p1", "d1"} {
		if q := tr.fleet.Load(p).Queued.Load(); q != 0 {
			t.Errorf("%s: %d prompt tokens queued after Done, want 0", p, q)
		}
	}
}
