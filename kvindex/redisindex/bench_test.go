package redisindex

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
)

// Numbers and the command that measured them: see bench.md next to this
// file.

func benchIndex(b *testing.B, addr string) *Index {
	b.Helper()
	kcfg := kvindex.DefaultConfig()
	local, err := kvindex.New(kcfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addrs = []string{addr}
	cfg.Timeout = 5 * time.Second // a loaded machine must not mark Redis down mid-run
	x, err := New(cfg, local, kcfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = x.rdb.Close() })
	return x
}

// percentiles reports p50 and p99 of the per-operation times.
func percentiles(b *testing.B, d []time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkMatch512 matches 512 blocks, every one held by every pod, over 8
// and 64 pods: through the memory index and through Redis on loopback.
func BenchmarkMatch512(b *testing.B) {
	srv := redisserver.New(b)
	for _, pods := range []int{8, 64} {
		x := benchIndex(b, srv.Addr)
		x.cfg.Prefix = fmt.Sprintf("bench%d:", pods)
		rng := rand.New(rand.NewPCG(1, 2))
		hs := make([]uint64, 512)
		for i := range hs {
			hs[i] = rng.Uint64()
		}
		cands := make([]kvindex.PodID, pods)
		for i := range cands {
			cands[i] = x.AddPod(fmt.Sprintf("pod-%d", i), "m")
		}
		x.tick() // every lease
		for _, id := range cands {
			if err := x.Stored(id, kvindex.TierGPU, hs); err != nil {
				b.Fatal(err)
			}
		}
		for _, backend := range []string{"memory", "redis"} {
			b.Run(fmt.Sprintf("%s/pods=%d", backend, pods), func(b *testing.B) {
				match := x.Match
				if backend == "memory" {
					match = x.local.Match
				}
				out := make([]kvindex.PodMatch, 0, pods)
				times := make([]time.Duration, 0, 1024)
				b.ReportAllocs()
				for b.Loop() {
					start := time.Now()
					out = match("m", hs, cands, out)
					times = append(times, time.Since(start))
				}
				if out[0].Blocks != 512 || out[pods-1].Blocks != 512 {
					b.Fatalf("Match = %+v, want every pod at 512 blocks", out[0])
				}
				if up, _ := x.Up(); !up {
					b.Fatal("Redis went down during the run")
				}
				percentiles(b, times)
			})
		}
	}
}

// BenchmarkStored16 writes one 16-block BlockStored event batch per
// operation as the pod's lease holder: batches per second per writer.
func BenchmarkStored16(b *testing.B) {
	srv := redisserver.New(b)
	x := benchIndex(b, srv.Addr)
	pod := x.AddPod("a", "m")
	x.tick()
	rng := rand.New(rand.NewPCG(3, 4))
	batches := make([][]uint64, 4096)
	for i := range batches {
		batches[i] = make([]uint64, 16)
		for j := range batches[i] {
			batches[i][j] = rng.Uint64()
		}
	}
	b.ReportAllocs()
	i := 0
	start := time.Now()
	for b.Loop() {
		if err := x.Stored(pod, kvindex.TierGPU, batches[i%len(batches)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i)/time.Since(start).Seconds(), "batches/s")
	if up, _ := x.Up(); !up {
		b.Fatal("Redis went down during the run")
	}
}
