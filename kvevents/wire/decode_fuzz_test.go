package wire

import (
	"math"
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder, seeded with every table
// case: it must never panic, and decoding the same bytes twice (with a
// reused Decoder) must give the same batch.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add(enc(f, tc.payload, tc.compact))
	}
	f.Add(storedBatch(f))
	f.Add([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	d1, d2 := NewDecoder(), NewDecoder()
	f.Fuzz(func(t *testing.T, p []byte) {
		b1, err1 := d1.Decode(p)
		if err1 != nil {
			if _, err2 := d2.Decode(p); err2 == nil {
				t.Fatalf("Decode(%x): error %v, then success", p, err1)
			}
			return
		}
		b2, err2 := d2.Decode(p)
		if err2 != nil {
			t.Fatalf("Decode(%x): success, then error %v", p, err2)
		}
		if !sameBatch(b1, b2) {
			t.Fatalf("Decode(%x) differs between decoders:\n%+v\n%+v", p, b1, b2)
		}
		for _, e := range b1.Events {
			if e.Digests != nil && len(e.Digests) != len(e.Hashes) {
				t.Fatalf("Decode(%x): %d digests for %d hashes", p, len(e.Digests), len(e.Hashes))
			}
			if len(e.Hashes) > len(p) || len(e.Tokens) > len(p) {
				t.Fatalf("Decode(%x): %d hashes, %d tokens from %d bytes", p, len(e.Hashes), len(e.Tokens), len(p))
			}
		}
	})
}

// sameBatch is reflect.DeepEqual with a NaN timestamp equal to itself.
func sameBatch(a, b *Batch) bool {
	if math.IsNaN(a.TS) != math.IsNaN(b.TS) {
		return false
	}
	ca, cb := *a, *b
	if math.IsNaN(ca.TS) {
		ca.TS, cb.TS = 0, 0
	}
	return reflect.DeepEqual(ca, cb)
}
