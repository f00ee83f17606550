package kvindex

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Measured 2026-11-21 on the 2-core development machine, shared with other
// work (load average 2–10), best of runs:
//
//	go test -run '^$' -bench 'Match512|Stored16|EntryBytes' -benchmem ./kvindex/
//	Match512/pods=8                     22 µs     0 allocs   (46 µs at load 9.6)
//	Match512/pods=64                   105 µs     0 allocs   (195 µs at load 9.6)
//	Stored16/refresh/entries=65536     2.15 µs    0 allocs
//	Stored16/evicting/entries=65536    2.6 µs     0 allocs
//	Stored16/refresh/entries=1048576   5.4 µs     0 allocs
//	Stored16/evicting/entries=1048576  5.7–10 µs  0 allocs
//	EntryBytes/pods-per-block=1        43.5 B/entry at 10M entries
//	EntryBytes/pods-per-block=8        43.3 B/entry at 10M entries
//
// 2026-11-29, the same machine, medians of 6 runs alternated in one call:
//
//	go test -run '^$' -bench Match512Groups -benchmem -count=6 ./kvindex/
//	Match512Groups/groups=1            27.5 µs   0 allocs
//	Match512Groups/groups=2            35.2 µs   0 allocs  (1.28x; target ≤ 2x)
//
// Targets: Match ≤ 30 µs (8 pods) and ≤ 120 µs (64), a 16-block store ≤ 3 µs,
// ≤ 48 B per entry.

func randomHashes(rng *rand.Rand, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = rng.Uint64()
	}
	return hs
}

// matchFleet returns an index of pods that each hold the 512 blocks of hs,
// and 4,096 unrelated ones so that the index is not trivially small.
func matchFleet(b *testing.B, pods int) (x *Index, hs []uint64, cands []PodID) {
	x = mustNew(b, DefaultConfig(), nil)
	rng := rand.New(rand.NewPCG(1, 2))
	hs = randomHashes(rng, 512)
	cands = make([]PodID, pods)
	for i := range cands {
		cands[i] = x.AddPod(fmt.Sprintf("pod-%d", i), "m")
		mustStore(b, x, cands[i], TierGPU, hs...)
		mustStore(b, x, cands[i], TierGPU, randomHashes(rng, 4096)...)
	}
	return x, hs, cands
}

func BenchmarkMatch512(b *testing.B) {
	for _, pods := range []int{8, 64} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			x, hs, cands := matchFleet(b, pods)
			out := make([]PodMatch, 0, pods)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out = x.Match("m", hs, cands, out)
			}
			if out[0].Blocks != 512 || out[pods-1].Blocks != 512 {
				b.Fatalf("Match = %+v, want every pod at 512 blocks", out[0])
			}
		})
	}
}

// BenchmarkMatch512Groups matches 512 blocks over 8 pods of a one-group
// model and of a two-group one (full attention and a 128-token sliding
// window, 16-token blocks): every pod holds the 512 blocks in its
// full-attention group; in its sliding-window group, half the pods hold the
// last 200 blocks and half hold them with a hole 3 blocks from the end, so
// that their hit ends 3 blocks short (the 8 blocks before the hole).
func BenchmarkMatch512Groups(b *testing.B) {
	const pods = 8
	for _, groups := range []int{1, 2} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			x, hs, cands := matchFleet(b, pods)
			for i := range cands {
				if groups == 1 {
					break
				}
				if err := x.SetGroups(cands[i], 16, []Group{{Index: 0, Kind: GroupFull}, {Index: 1, Kind: GroupSlidingWindow, Window: 128}}); err != nil {
					b.Fatal(err)
				}
				for j := 512 - 200; j < 512; j++ {
					if i%2 == 1 && j == 512-3 {
						continue
					}
					mustStore(b, x, cands[i], TierGPU, GroupKey(hs[j], 1))
				}
			}
			out := make([]PodMatch, 0, pods)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out = x.Match("m", hs, cands, out)
			}
			if want := 512 - 3*(groups-1); out[0].Blocks != 512 || out[1].Blocks != want {
				b.Fatalf("Match = %+v, want 512 and %d blocks", out[:2], want)
			}
		})
	}
}

// BenchmarkStored16 applies one 16-block BlockStored event to an index in
// steady state: full (each new entry evicts the least recently stored one),
// or re-storing blocks the pod already holds. With pods, the events come
// from that many pods in turn, each evicting whichever pod's entry is the
// oldest.
func BenchmarkStored16(b *testing.B) {
	for _, bench := range []struct {
		mode       string
		full, pods int
	}{{"evicting", 1 << 16, 1}, {"refresh", 1 << 16, 1}, {"evicting", 1 << 20, 1}, {"refresh", 1 << 20, 1}, {"evicting", 1 << 20, 64}} {
		mode, full, npods := bench.mode, bench.full, bench.pods
		name := fmt.Sprintf("%s/entries=%d", mode, full)
		if npods > 1 {
			name = fmt.Sprintf("%s/pods=%d/entries=%d", mode, npods, full)
		}
		b.Run(name, func(b *testing.B) {
			limit := full // full: every new entry evicts one
			if mode == "refresh" {
				limit *= 2 // room for shards that got more than their share
			}
			x := mustNew(b, Config{Shards: 64, MaxEntries: limit, SpeculativeTTL: 1}, nil)
			pods := make([]PodID, npods)
			for i := range pods {
				pods[i] = x.AddPod(fmt.Sprintf("pod-%d", i), "m")
			}
			rng := rand.New(rand.NewPCG(3, 4))
			batches := make([][]uint64, full/16)
			for i := range batches {
				batches[i] = randomHashes(rng, 16)
				mustStore(b, x, pods[i%npods], TierGPU, batches[i]...)
			}
			if mode == "evicting" {
				for i := range batches {
					batches[i] = randomHashes(rng, 16)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				mustStore(b, x, pods[i%npods], TierGPU, batches[i%len(batches)]...)
				i++
			}
		})
	}
}

// BenchmarkSpeculateSettle512 is what a decision and its end cost the
// index for a 512-block prompt (an 8k-token chat): speculating the blocks
// on the chosen pod, then settling them. "held": the pod holds the prompt
// for real (a warm prompt); "new": blocks no pod holds, a new prompt each
// time from 256 in turn (a cold one).
func BenchmarkSpeculateSettle512(b *testing.B) {
	for _, mode := range []string{"held", "new"} {
		b.Run(mode, func(b *testing.B) {
			x := mustNew(b, DefaultConfig(), nil)
			rng := rand.New(rand.NewPCG(7, 8))
			pod := x.AddPod("a", "m")
			prompts := make([][]uint64, 256)
			for i := range prompts {
				prompts[i] = randomHashes(rng, 512)
				if mode == "held" {
					mustStore(b, x, pod, TierGPU, prompts[i]...)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				hs := prompts[i%len(prompts)]
				if err := x.Speculate(pod, hs); err != nil {
					b.Fatal(err)
				}
				if err := x.Settle(pod, hs); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkEntryBytes fills an index with 10M entries and reports the heap
// per entry: one pod per block (the worst case), and 8 pods per block.
func BenchmarkEntryBytes(b *testing.B) {
	for _, perBlock := range []int{1, 8} {
		b.Run(fmt.Sprintf("pods-per-block=%d", perBlock), func(b *testing.B) {
			const entries = 10_000_000
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				x := mustNew(b, Config{Shards: 64, MaxEntries: entries * 11 / 10, SpeculativeTTL: 1}, nil)
				rng := rand.New(rand.NewPCG(5, 6))
				hs := randomHashes(rng, entries/perBlock)
				for p := range perBlock {
					mustStore(b, x, x.AddPod(fmt.Sprintf("pod-%d", p), "m"), TierGPU, hs...)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if n, _ := x.Len(); n != entries {
					b.Fatalf("Len() = %d, want %d", n, entries)
				}
				hsBytes := float64(len(hs) * 8)
				b.ReportMetric((float64(after.HeapAlloc-before.HeapAlloc)-hsBytes)/entries, "B/entry")
				runtime.KeepAlive(x)
			}
		})
	}
}
