package tokenizer

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
)

const (
	// hotBits sizes a hotWords: 2^hotBits entries of 32 bytes (512 KiB),
	// under half of a core's L2 cache on the machines kvrouter is
	// measured on. The vocabulary's table is 16 bytes a slot, twice as many
	// slots as tokens (8 MiB for 150k tokens), and its keys another MiB:
	// a lookup there misses every cache but the last level, twice.
	hotBits    = 14
	hotLongest = 16 // longest word (bytes) a hotWords keeps: two 8-byte words
	hotIDs     = 3  // most ids a word a hotWords keeps encodes to
)

// hotWords is a two-way set-associative cache of short words and their
// ids, used by one encoding at a time. A set is two entries in one 64-byte
// cache line (the table is a large allocation, so page-aligned): the second
// way costs no read of memory, and two words that share a set no longer
// push each other out. A new word takes the set's first entry, and the
// one there moves to the second. A hit costs two unaligned reads of the
// word, a multiplication and one read of memory the encoding touched
// recently; it replaces a hash of the word, the vocabulary's slot and key
// and, for a word of several tokens, the shared word cache and its lock. A word's
// ids are a fact about its tokenizer, so entries stay valid from one
// encoding to the next: each Tokenizer keeps its own pool of them, and a
// hotWords comes back warm (sync.Pool keeps one per processor, which also
// keeps it in that core's cache). A pool's objects unused through two
// garbage collections are dropped, so an idle process holds none.
type hotWords [1 << hotBits]hotWord

type hotWord struct {
	a, b uint64         // the word's bytes, zero padded to 16
	n    uint8          // its length + 1; 0: empty
	k    uint8          // how many ids it encodes to
	ids  [hotIDs]uint32 // they
}

// holds tells whether x is the entry of the word of n bytes a, b.
func (x *hotWord) holds(a, b uint64, n int) bool {
	return x.a == a && x.b == b && x.n == uint8(n+1)
}

// hotPool is a Tokenizer's tables of hot words. At most limit are taken at
// once, so that a burst of concurrent decisions cannot hold a table each
// (a thousand streams would be 512 MiB): an encoding that finds every table taken
// encodes without one, as fast as before tables existed.
type hotPool struct {
	pool  sync.Pool
	taken atomic.Int32
	limit int32
}

// newHotPool returns a pool that lends at most two tables per processor,
// more than can run at once.
func newHotPool() *hotPool {
	p := &hotPool{limit: int32(2 * runtime.GOMAXPROCS(0))}
	p.pool.New = func() any { return new(hotWords) }
	return p
}

// take returns a table for one encoding or chunk worker, which gives it
// back with put; nil when limit are taken.
func (p *hotPool) take() *hotWords {
	if p.taken.Add(1) > p.limit {
		p.taken.Add(-1)
		return nil
	}
	return p.pool.Get().(*hotWords)
}

// put gives back a table from take (nil: none was taken).
func (p *hotPool) put(h *hotWords) {
	if h != nil {
		p.pool.Put(h)
		p.taken.Add(-1)
	}
}

// hotKey returns the bytes of the word s[i:j] (0 < j-i ≤ hotLongest) as
// two words, zero padded, and the index of its set's first entry (even).
func hotKey(s string, i, j int) (a, b uint64, k uint32) {
	n := j - i
	if i+16 <= len(s) {
		a, b = le64(s[i:]), le64(s[i+8:])
		switch {
		case n < 8:
			a &= 1<<(8*n) - 1
			b = 0
		case n < 16:
			b &= 1<<(8*(n-8)) - 1
		}
	} else {
		var buf [16]byte
		copy(buf[:], s[i:j])
		a, b = binary.LittleEndian.Uint64(buf[:8]), binary.LittleEndian.Uint64(buf[8:])
	}
	h := (a^uint64(n))*0x9e3779b97f4a7c15 ^ b*0xc2b2ae3d27d4eb4f
	return a, b, uint32(h>>(64-hotBits)) &^ 1
}

// le64 reads the first 8 bytes of s as a little-endian word (one load:
// the compiler combines the byte reads).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
