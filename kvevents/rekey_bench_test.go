package kvevents

import (
	"testing"

	"github.com/kvrouter/kvrouter/kvevents/wire"
)

// BenchmarkApplyRekeyed applies BlockStored events of 16 blocks (256 token
// ids, sha256_cbor) to a rekeyed pod, each continuing the last, then the
// BlockRemoved of the event before it, against the same pod verified (the
// hashes stored as published). ns/op is per pair of events.
//
//	go test -run '^$' -bench ApplyRekeyed -benchmem -count 3 ./kvevents/
//
// 2026-11-24, nproc=2 shared with two other engineers:
//
//	BenchmarkApplyRekeyed/verified-2  3151 2925 3033 ns/op  469 B/op  0 allocs/op
//	BenchmarkApplyRekeyed/rekeyed-2   9382 9587 9703 ns/op  504 B/op  1 allocs/op
//
// Rekeying adds about 6.5 µs per 16-block event: 16 block hashes (about
// 225 ns each, BenchmarkHashBlock) and the map's lookups, inserts and
// deletes; only mismatching pods pay it.
func BenchmarkApplyRekeyed(b *testing.B) {
	for _, rekeyed := range []bool{false, true} {
		name := map[bool]string{false: "verified", true: "rekeyed"}[rekeyed]
		b.Run(name, func(b *testing.B) {
			tokens := u32s(0, 16*4096)
			var f *applyFixture
			var chain []uint64
			if rekeyed {
				f, _ = mismatchFixture(b)
				chain, _ = podChain(b, nil, tokens)
			} else {
				f = newApplyFixture(b)
				f.applyEvents(b, stored(vecPlain, nil, u32s(0, 48), 16)) // verified
				chain = routerHashes(b, tokens)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				n := i % 256 * 16
				e := stored(chain[n:n+16], nil, tokens[n*16:(n+16)*16], 16)
				if n > 0 {
					e.Parent, e.HasParent = chain[n-1], true
				}
				events := []wire.Event{e}
				if n > 0 {
					events = append(events, wire.Event{Type: wire.BlockRemoved, Hashes: chain[n-16 : n]})
				}
				if err := f.a.apply(&wire.Batch{Events: events}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
