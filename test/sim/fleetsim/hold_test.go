package fleetsim

import (
	"testing"

	"github.com/kvrouter/kvrouter/router"
)

// TestKVRouterHoldsPastTheCaches: users who each re-send one prompt, more
// of them than the pods' caches hold, under a client keeping 160 requests
// in flight (llm-d's cache-overload runs, shortened). Routing each request
// at once, every pod's queue cycles the prompts through its cache and
// nearly all miss; with kvrouter's queue (router.Config.QueuePrefillsPerPod,
// on by default) a pod with room gets the waiting request it caches, so
// the caches hit and the requests' first tokens, held time included, come
// sooner.
func TestKVRouterHoldsPastTheCaches(t *testing.T) {
	cfg, w := overloadFleet(t, "cycle of users past the caches", []float64{8, 12, 20}, 50)
	run := func(hold int) Stats {
		t.Helper()
		res, err := Run(cfg, w, func(s *Sim) (Policy, error) {
			rc := RouterConfig(s)
			rc.QueuePrefillsPerPod = hold
			return newKVRouterConfig(s, rc)
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.TimedOut > 0 || res.Dropped > 0 {
			t.Fatalf("hold %d: %d timed out, %d dropped", hold, res.TimedOut, res.Dropped)
		}
		st := Summarize(w, res, BoundHits(w, cfg.Pods*cfg.Blocks))
		return st[len(st)-1]
	}
	def := router.DefaultConfig().QueuePrefillsPerPod
	at, held := run(0), run(def)
	t.Logf("routing at once: TTFT mean %.2f s, hit ratio %.1f%%; holding: %.2f s, %.1f%%", at.Mean, 100*at.HitRatio, held.Mean, 100*held.HitRatio)
	if held.HitRatio < at.HitRatio+0.25 || held.Mean > 0.7*at.Mean {
		t.Errorf("holding: hit ratio %.2f, TTFT mean %.2f s; routing at once %.2f, %.2f s: want 25 points more hits and at most 0.7 of the mean", held.HitRatio, held.Mean, at.HitRatio, at.Mean)
	}
}
