package kvevents

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
)

// BenchmarkEnginePages decodes and indexes SGLang's stream: one
// BlockStored per 16-token page, ids of its own (signed), 64 pages a
// batch, each page continuing the last, rekeyed under kvrouter's
// sha256_cbor hashes of its token ids; then the removal of the batch
// before, 64 pages in one event. pages/s is per core (the benchmark runs on one
// goroutine).
//
//	go test -run '^$' -bench EnginePages -benchmem -count 3 ./kvevents/
func BenchmarkEnginePages(b *testing.B) {
	const pages, batches = 64, 64
	tokens := u32s(0, 16*pages*batches)
	id := func(i int) uint64 { return uint64(i+1) * 0x9e3779b97f4a7c15 }
	var stores, removals [][]byte
	for n := range batches {
		var events []vllmpub.Event
		var gone []uint64
		for j := range pages {
			i := n*pages + j
			e := vllmpub.Event{Type: "BlockStored", BlockHashes: []uint64{id(i)}, TokenIDs: tokens[i*16 : (i+1)*16], BlockSize: 16}
			if i > 0 {
				parent := id(i - 1)
				e.Parent = &parent
			}
			events = append(events, e)
			gone = append(gone, id(i))
		}
		for _, batch := range [][]vllmpub.Event{events, {{Type: "BlockRemoved", BlockHashes: gone}}} {
			payload, err := vllmpub.Encode(vllmpub.Batch{TS: 1.7e9, Events: batch}, vllmpub.Form{SignedHashes: true})
			if err != nil {
				b.Fatal(err)
			}
			if len(batch) > 1 {
				stores = append(stores, payload)
			} else {
				removals = append(removals, payload)
			}
		}
	}
	f := foreignFixture(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n := i % batches
		todo := [][]byte{stores[n], removals[(n+batches-1)%batches]}
		if i == 0 {
			todo = todo[:1] // nothing stored yet to remove
		}
		for _, payload := range todo {
			batch, err := f.a.dec.Decode(payload)
			if err != nil {
				b.Fatal(err)
			}
			if err := f.a.apply(batch); err != nil {
				b.Fatal(err)
			}
		}
		i++
	}
	b.ReportMetric(float64(b.N*pages)/b.Elapsed().Seconds(), "pages/s")
	for r, c := range f.m.rekeyFailed {
		if got := testutil.ToFloat64(c); got != 0 {
			b.Fatalf("%v pages not rekeyed (%s): the benchmark measured no indexing", got, rekeyReasonNames[r])
		}
	}
	if f.idx.PodEntries(f.id) == 0 {
		b.Fatal("nothing indexed")
	}
}
