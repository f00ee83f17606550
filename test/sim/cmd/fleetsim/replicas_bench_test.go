package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

// BenchmarkHeteroReplicas plays heterogeneous-speeds' shared-prefix workload (4 pods, two
// at half speed; 8 then 12 requests/s, 60 s each from empty caches; seeds
// 1–3) through kvrouter as one replica, and as 2 and 4 replicas splitting
// the traffic round robin over one real Redis (index, in-flight prefill
// and, unless not-shared, homes shared: index.redis.share_homes). It
// reports, pooled over the seeds, the TTFT p90 and mean of the whole run,
// the cold start's mean (the 8 requests/s stage) and the warm stage's p90
// (12 requests/s), in seconds of the simulation.
//
//	cd test/sim && go test -run '^$' -bench HeteroReplicas -benchtime 1x ./cmd/fleetsim/
func BenchmarkHeteroReplicas(b *testing.B) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	scs, err := heteroScenarios(options{traces: "../../../../testdata/traces", seed: 1}, h, fleetsim.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var runs []*scenario
	for _, sc := range scs {
		if strings.HasPrefix(heteroWorkload(sc), heterogeneousSpeeds+", shared prefix") {
			runs = append(runs, sc)
		}
	}
	if len(runs) != heteroSeeds {
		b.Fatalf("%d shared-prefix runs of heterogeneous-speeds, want %d", len(runs), heteroSeeds)
	}
	srv := redisserver.New(b)
	for _, c := range []struct {
		name string
		r    fleetsim.Replicated
	}{
		{"replicas=1", fleetsim.Replicated{Replicas: 1}},
		{"replicas=2/not-shared", fleetsim.Replicated{Replicas: 2, RedisAddr: srv.Addr, PrivateHomes: true}},
		{"replicas=2/shared", fleetsim.Replicated{Replicas: 2, RedisAddr: srv.Addr}},
		{"replicas=4/not-shared", fleetsim.Replicated{Replicas: 4, RedisAddr: srv.Addr, PrivateHomes: true}},
		{"replicas=4/shared", fleetsim.Replicated{Replicas: 4, RedisAddr: srv.Addr}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := range b.N {
				var all, cold, warm []float64
				for _, sc := range runs {
					r := c.r
					r.Prefix = fmt.Sprintf("%s:%d:%d:", c.name, i, sc.cfg.Seed)
					res, err := fleetsim.Run(sc.cfg, sc.w, r.Policy())
					if err != nil {
						b.Fatal(err)
					}
					all = append(all, ttfts(res)...)
					cold = append(cold, fleetsim.LevelTTFTs(nil, sc.w, res, 0)...)
					warm = append(warm, fleetsim.LevelTTFTs(nil, sc.w, res, 1)...)
				}
				a, c, w := summarize(all), summarize(cold), summarize(warm)
				b.ReportMetric(a.p90, "p90-s")
				b.ReportMetric(a.mean, "mean-s")
				b.ReportMetric(c.mean, "cold-mean-s")
				b.ReportMetric(w.p90, "warm-p90-s")
			}
		})
	}
}
