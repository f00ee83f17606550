package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestMergeHeapEqualsScan checks that the heap merge of long words and the
// scanning merge of short ones agree on random words.
func TestMergeHeapEqualsScan(t *testing.T) {
	b := &bpe{merges: map[uint64]uint64{}}
	rng := rand.New(rand.NewPCG(3, 4))
	// Symbols 0..3; merges of random pairs to new ids 4..40, random ranks.
	next := uint32(4)
	for rank := range 60 {
		l, r := uint32(rng.IntN(int(next))), uint32(rng.IntN(int(next)))
		key := uint64(l)<<32 | uint64(r)
		if _, ok := b.merges[key]; ok {
			continue
		}
		b.merges[key] = uint64(rank)<<32 | uint64(next)
		next++
	}
	for range 2000 {
		n := 1 + rng.IntN(smallWord)
		word := make([]uint32, n)
		for i := range word {
			word[i] = uint32(rng.IntN(4))
		}
		scan := b.merge(slices.Clone(word))
		heap := b.mergeHeap(slices.Clone(word))
		if !slices.Equal(scan, heap) {
			t.Fatalf("merge(%v) = %v, mergeHeap = %v", word, scan, heap)
		}
	}
}

func TestNFC(t *testing.T) {
	tests := []struct{ in, want string }{
		{"e\u0301", "é"},
		{"A\u030a", "Å"},
		{"\u1100\u1161\u11a8", "\uac01"},
		{"a\u0323\u0302", "ậ"},
		{"a\u0302\u0323", "ậ"},
		// Tables of the Rust normalizer: U+11938 neither composed nor decomposed.
		{"\U00011935\U00011930", "\U00011935\U00011930"},
		{"\U00011938\u0301", "\U00011938\u0301"},
		// 31 marks: no U+034F inserted, all reordered as one run.
		{"a" + repeat("\u0301", 31), "á" + repeat("\u0301", 30)},
		{"o" + repeat("\u0308", 32) + "\u0323", "ọ\u0308" + repeat("\u0308", 31)},
	}
	for _, tt := range tests {
		if got := nfc(tt.in); got != tt.want {
			t.Errorf("nfc(%+q) = %+q, want %+q", tt.in, got, tt.want)
		}
		if got := nfcSlow(tt.in); got != tt.want {
			t.Errorf("nfcSlow(%+q) = %+q, want %+q", tt.in, got, tt.want)
		}
	}
}

// TestIsASCII puts one byte of 0x80 or more at every position of texts of
// every length around the eight bytes isASCII reads at once.
func TestIsASCII(t *testing.T) {
	for n := range 33 {
		text := []byte(strings.Repeat("a", n))
		if !isASCII(string(text)) {
			t.Fatalf("isASCII(%q) = false", text)
		}
		for i := range n {
			for _, c := range []byte{0x80, 0xc3, 0xff} {
				text[i] = c
				if isASCII(string(text)) {
					t.Fatalf("isASCII(%q) = true with %#x at %d", text, c, i)
				}
			}
			text[i] = 0x7f
			if !isASCII(string(text)) {
				t.Fatalf("isASCII(%q) = false with 0x7f at %d", text, i)
			}
			text[i] = 'a'
		}
	}
}

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}
