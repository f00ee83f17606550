package fleetsim

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// benchSharedPrefix is tinySharedPrefix's workload (4 pods, 16 groups of 5
// users sharing a system prompt) with 8-second stages.
func benchSharedPrefix(b *testing.B, seed uint64) (Config, *Workload) {
	b.Helper()
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	sp := SharedPrefix{
		Groups: 16, PerGroup: 5, System: 1500, Question: 300, Output: 10,
		WarmupQPS: 20, Warmup: 8, Stages: []float64{20, 80}, StageSeconds: 8, QPSScale: 1, Seed: seed,
	}
	cfg := DefaultConfig()
	cfg.Pods, cfg.Seed = 4, seed
	cfg.Blocks = int(float64(sp.WorkingSet()) / 0.73 / float64(cfg.Pods*cfg.BlockSize))
	return cfg, sp.Generate("bench", h)
}

// BenchmarkReplicas runs the tiny shared-prefix workload through kvrouter
// as 1, 2 and 4 replicas splitting the traffic round robin: with private
// indexes (the memory backend), with one index shared through a real Redis
// but each replica's in-flight prefill its own (shared-spec: shared
// entries and speculation, Config.NoSharedLoad), and with the in-flight
// prefill shared too (shared, the redis backend's default). It reports the
// time-to-first-token p90 of simulated seconds.
//
//	cd test/sim && go test -run '^$' -bench Replicas -benchtime 3x ./fleetsim/
//
// Measured 2026-11-25 (seeds 7–9, simulated seconds; the wall time is the
// Redis round trips):
//
//	replicas  index        TTFT p90   hit ratio
//	1         private      19.8 ms    0.948
//	1         shared-spec  18.4 ms    0.962
//	1         shared       18.4 ms    0.962
//	2         private      17.8 ms    0.949
//	2         shared-spec  27.2 ms    0.934
//	2         shared       18.4 ms    0.962
//	4         private      19.3 ms    0.944
//	4         shared-spec  30.5 ms    0.933
//	4         shared       18.4 ms    0.962
//
// Shared speculation alone hurts: every replica sees a new prefix's
// speculative blocks on one pod and sends its share of the burst there,
// while the prefill each replica charges that pod stays private, so none
// sees the queue the others built there (each counts the others' requests
// only once a scrape reports them waiting). With the in-flight prefill
// shared as well, 2 and 4 replicas routed exactly as one did: the same
// TTFT p90 and hit ratio as one replica.
//
// Later the same day the queue took the time a pod has worked on the
// oldest prefill under way as done (router.Router.queue), which a replica
// can tell only while all of the pod's in-flight prefill is its own, and
// the speculative records came to fold as kvindex's do (confirmed by the
// pod's store, dropped by a clear); at 0dfc20d:
//
//	replicas  index        TTFT p90   hit ratio
//	1         private      21.5 ms    0.934
//	1         shared       18.1 ms    0.952
//	2         private      19.0 ms    0.947
//	2         shared-spec  22.2 ms    0.944
//	2         shared       22.6 ms    0.933
//	4         private      19.3 ms    0.945
//	4         shared-spec  19.7 ms    0.950
//	4         shared       18.4 ms    0.961
//
// With the records' folding alone 2 replicas shared did 16.0 ms and 4
// did 18.4; the queue's discount (here counted only while no other
// replica's prefill is in flight on the pod) costs the 2-replica run
// 6.6 ms of its p90. Publishing each replica's start in the load table
// and discounting the oldest head of all did worse (24.1 ms at 2 and at
// 4): a replica's request that arrives behind another's is taken to have
// begun on arrival.
func BenchmarkReplicas(b *testing.B) {
	srv := redisserver.New(b)
	for _, n := range []int{1, 2, 4} {
		for _, index := range []string{"private", "shared-spec", "shared"} {
			name := fmt.Sprintf("replicas=%d/%s", n, index)
			c := Replicated{Replicas: n}
			if index != "private" {
				c.RedisAddr, c.PrivateLoad = srv.Addr, index == "shared-spec"
			}
			b.Run(name, func(b *testing.B) {
				var p90, hit float64
				for i := range b.N {
					cfg, w := benchSharedPrefix(b, uint64(7+i))
					c.Prefix = fmt.Sprintf("%s:%d:", name, i)
					res, err := Run(cfg, w, c.Policy())
					if err != nil {
						b.Fatal(err)
					}
					p90 += PooledTTFT(0.9, res)
					var held, blocks int
					for _, o := range res.Outcomes {
						held, blocks = held+o.Hit, blocks+o.Blocks
					}
					hit += float64(held) / float64(max(blocks, 1))
				}
				b.ReportMetric(p90/float64(b.N), "ttft-p90-s")
				b.ReportMetric(hit/float64(b.N), "hit-ratio")
			})
		}
	}
}
