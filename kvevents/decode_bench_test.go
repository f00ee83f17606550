package kvevents

import "testing"

// storedBatch is a realistic batch: one BlockStored of 16 blocks of 16 tokens
// with compact integers (as vLLM's msgpack writes them), 64-bit hashes and a
// parent.
func storedBatch(tb testing.TB) []byte {
	hashes := make([]any, 16)
	for i := range hashes {
		hashes[i] = uint64(0x9e3779b97f4a7c15) * uint64(i+1)
	}
	return enc(tb, []any{1.7e9, []any{
		[]any{"BlockStored", hashes, uint64(0xdeadbeefcafef00d), tokens(1000, 256), 16, nil, nil},
	}, 0}, true)
}

// BenchmarkDecodeBlockStored16 decodes one 16-block BlockStored batch.
//
//	go test -run '^$' -bench DecodeBlockStored16 -benchmem -count=5 ./kvevents/   (nproc=2)
//
// 2026-11-21, nproc=2 (shared; quiet moments, then load average 9):
//
//	BenchmarkDecodeBlockStored16-2  1000000  1545 ns/op  618.14 MB/s  0 B/op  0 allocs/op
//	BenchmarkDecodeBlockStored16-2   769928  1681 ns/op  568.04 MB/s  0 B/op  0 allocs/op
//	BenchmarkDecodeBlockStored16-2   594886  2744 ns/op  348.08 MB/s  0 B/op  0 allocs/op (loaded)
//
// Budget: 3 µs and 2 allocations (llm-d: 9.6 µs).
func BenchmarkDecodeBlockStored16(b *testing.B) {
	p := storedBatch(b)
	d := NewDecoder()
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		batch, err := d.Decode(p)
		if err != nil || len(batch.Events[0].Hashes) != 16 {
			b.Fatal(err)
		}
	}
}
