package router

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
)

// TestSpeculationLastsUntilPrefilled: a decision's speculative entries count
// while its request waits for its prefill, however long that takes under
// load, then only for the index's grace period after Prefilled (or after
// Done without it); a request never reported ends at the index's TTL.
func TestSpeculationLastsUntilPrefilled(t *testing.T) {
	for _, end := range []string{"Prefilled", "Done", "never"} {
		t.Run(end, func(t *testing.T) {
			now := time.Unix(0, 0)
			icfg := kvindex.DefaultConfig()
			icfg.Now = func() time.Time { return now }
			tr := newTestRouterIndex(t, icfg)
			body := completion("llama", prompt, "")
			d, err := tr.route("/v1/completions", body)
			if err != nil {
				t.Fatal(err)
			}
			spec := func(when string) int {
				t.Helper()
				return tr.scoreOn(body, d.Pod, when).Spec
			}
			wait := icfg.SpeculativeTTL / 2 // queued far beyond the grace period
			now = now.Add(wait)
			if got := spec("queued"); got != 7 {
				t.Fatalf("speculative blocks on %s %v after the decision, unprefilled = %d, want 7", d.Pod, wait, got)
			}
			left := icfg.SpeculativeTTL - wait
			switch end {
			case "Prefilled":
				d.Prefilled()
				d.Prefilled() // twice is harmless
				left = icfg.SpeculativeGrace
			case "Done":
				d.Done()
				left = icfg.SpeculativeGrace
			}
			now = now.Add(left - time.Millisecond)
			if got := spec("before the end"); got != 7 {
				t.Fatalf("speculative blocks %v after %s = %d, want 7", left-time.Millisecond, end, got)
			}
			now = now.Add(time.Millisecond)
			if got := spec("at the end"); got != 0 {
				t.Fatalf("speculative blocks %v after %s = %d, want 0", left, end, got)
			}
			d.Done()
		})
	}
}

// TestQueuedRequestKeepsEvictedPrefix: a request routed to the pod caching
// its prefix still waits there when the pod evicts those blocks; the pod
// will compute them again before the request's first token, so the next
// request with the prefix follows it there, until the first is prefilled
// and the index's grace period has passed without the pod storing them.
func TestQueuedRequestKeepsEvictedPrefix(t *testing.T) {
	now := time.Unix(0, 0)
	icfg := kvindex.DefaultConfig()
	icfg.Now = func() time.Time { return now }
	tr := newTestRouterIndex(t, icfg)
	body := completion("llama", prompt, "")
	tr.store("a", prompt, "", "")
	first, err := tr.route("/v1/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	if first.Pod != "a" || first.Matched != 7 {
		t.Fatalf("Route with the prefix cached on a = %s (%d blocks), want a (7)", first.Pod, first.Matched)
	}
	tr.evict("a", prompt)
	now = now.Add(10 * time.Second)
	if s := tr.scoreOn(body, "a", "evicted, first request queued"); s.Matched != 7 || s.Spec != 7 {
		t.Fatalf("a after evicting the blocks its queued request needs: %d blocks, %d speculative, want 7 and 7", s.Matched, s.Spec)
	}
	first.Prefilled()
	now = now.Add(icfg.SpeculativeGrace)
	if s := tr.scoreOn(body, "a", "prefilled, grace over"); s.Matched != 0 {
		t.Fatalf("a after the request's prefill and the grace period, no store: %d blocks, want 0", s.Matched)
	}
	first.Done()
}

// countingIndex counts the blocks a router tells its index to speculate
// and to settle.
type countingIndex struct {
	*kvindex.Index
	speculated, settled int
}

func (c *countingIndex) Speculate(pod kvindex.PodID, hashes []uint64) error {
	c.speculated += len(hashes)
	return c.Index.Speculate(pod, hashes)
}

func (c *countingIndex) Settle(pod kvindex.PodID, hashes []uint64) error {
	c.settled += len(hashes)
	return c.Index.Settle(pod, hashes)
}

// TestSpeculationOncePerBurst: requests sharing a prompt on one pod tell
// the index of its blocks' speculation when the first is routed, again
// once the refresh (half the grace period) has passed while more are routed,
// and of the settling when the last of those in flight is prefilled; the
// entries count while any of them waits, where the first one's settling
// used to shorten them all.
func TestSpeculationOncePerBurst(t *testing.T) {
	now := time.Unix(0, 0)
	icfg := kvindex.DefaultConfig()
	icfg.Now = func() time.Time { return now }
	tr := newTestRouterIndex(t, icfg)
	ci := &countingIndex{Index: tr.index}
	tr.Router.index = ci
	body := completion("llama", prompt, "")
	want := func(when string, speculated, settled, spec int) {
		t.Helper()
		if ci.speculated != speculated || ci.settled != settled {
			t.Errorf("%s: index told of %d speculated and %d settled blocks, want %d and %d", when, ci.speculated, ci.settled, speculated, settled)
		}
		if got := tr.scoreOn(body, "b", when).Spec; got != spec {
			t.Errorf("%s: %d speculative blocks on b, want %d", when, got, spec)
		}
	}
	first, second := tr.routeToB(body), tr.routeToB(body)
	want("two routed", 7, 0, 7)
	first.Prefilled()
	now = now.Add(icfg.SpeculativeGrace + time.Second)
	tr.advance(icfg.SpeculativeGrace + time.Second)
	want("first prefilled, the grace period over", 7, 0, 7)
	if tr.refresh != icfg.SpeculativeGrace/2 {
		t.Fatalf("refresh %v, want half the grace period", tr.refresh)
	}
	tr.advance(tr.refresh)
	third := tr.routeToB(body)
	want("third routed a refresh later", 14, 0, 7)
	second.Done()
	third.Prefilled()
	want("all prefilled", 14, 7, 7)
	now = now.Add(icfg.SpeculativeGrace)
	want("all prefilled, the grace period over", 14, 7, 0)
	if n := tr.fleet.Load("b").Spec.Speculated(); n != 0 {
		t.Errorf("b's ledger holds %d blocks after every decision was prefilled, want 0", n)
	}
	third.Done()
	fourth := tr.routeToB(body)
	want("routed again", 21, 7, 7)
	fourth.Done()
}

// TestSpeculationRenewedOverStoredBlocks: a request routed to a pod that
// stored the prompt's blocks for a request still in flight there tells
// the index of its speculation again, however recently the first did: the
// store ended the first speculative entries, and the new ones keep the
// blocks counted should the pod evict them while the request waits.
func TestSpeculationRenewedOverStoredBlocks(t *testing.T) {
	now := time.Unix(0, 0)
	icfg := kvindex.DefaultConfig()
	icfg.Now = func() time.Time { return now }
	tr := newTestRouterIndex(t, icfg)
	body := completion("llama", prompt, "")
	first := tr.routeToB(body)
	tr.store("b", prompt, "", "") // first's chunks stored while it runs
	second := tr.routeToB(body)
	first.Done()
	tr.evict("b", prompt)
	if s := tr.scoreOn(body, "b", "evicted, second queued"); s.Matched != 7 || s.Spec != 7 {
		t.Fatalf("b after evicting the blocks its queued request needs: %d blocks, %d speculative, want 7 and 7", s.Matched, s.Spec)
	}
	second.Done()
}
