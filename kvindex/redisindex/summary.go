package redisindex

import (
	"bytes"
	"encoding/binary"

	"github.com/kvrouter/kvrouter/kvindex"
)

// A compacted block key starts with a summary of its plainest holders:
// the pods holding the block once, in the GPU tier, under the epoch they
// had when the compaction read the pod table at version V (the table's
// "#ver", which every epoch change raises, and which each pod's entry
// records as of its own last change). A header record — [0:4] the body's
// length in records, [4] kindSummary, [5:8] zero, [8:16] V — is followed
// by the body: the pods' numbers, ascending, as uvarint deltas, padded
// with zero bytes to a whole record. A member counts as a GPU store of
// its current epoch while its entry's version is at most V (no epoch
// change since the compaction read the table); after one it counts for
// nothing, as its old records would. 64 holders take 80 bytes, not 1 KiB.
const kindSummary = 5

// summaryOf is the summary of pods nums (ascending) under table version v.
func summaryOf(v uint64, nums []uint32) []byte {
	var body []byte
	prev := uint32(0)
	for _, n := range nums {
		body = binary.AppendUvarint(body, uint64(n-prev))
		prev = n
	}
	for len(body)%recordSize != 0 {
		body = append(body, 0)
	}
	return append(appendRecord(nil, uint32(len(body)/recordSize), kindSummary, 0, v), body...)
}

// summaryNext reads the pod number of a summary's body at i, after prev:
// the number and the index after it, or end at the body's end (its
// padding, zeros to the end); ok is false for a body of no known shape (a
// number past 2³²−1, a nonzero byte in the padding, a truncated varint).
func summaryNext(body []byte, i int, prev uint32) (num uint32, next int, end, ok bool) {
	if i >= len(body) || body[i] == 0 {
		for ; i < len(body); i++ {
			if body[i] != 0 {
				return 0, i, true, false
			}
		}
		return 0, i, true, true
	}
	d, n := uint64(body[i]), 1
	if d >= 0x80 {
		if d, n = binary.Uvarint(body[i:]); n <= 0 {
			return 0, i, true, false
		}
	}
	if d > uint64(1<<32-1-prev) {
		return 0, i, true, false
	}
	return prev + uint32(d), i + n, false, true
}

// summaryMembers calls fn with each pod number of a summary's body; it
// reports false for a body of no known shape (summaryNext).
func summaryMembers(body []byte, fn func(num uint32)) bool {
	for i, num := 0, uint32(0); ; {
		var end, ok bool
		if num, i, end, ok = summaryNext(body, i, num); !ok || end {
			return ok
		}
		fn(num)
	}
}

// summaryMemo is what summaryFast keeps of the last summary it read in a
// match: its body and members' bits, and the bits of the candidates whose
// pod table entries' versions are at most v.
type summaryMemo struct {
	ok, verOK     bool
	body          []byte
	bits, verBits []uint64
	v             uint64
}

// summary counts the members of a summary (kindSummary) of table version
// v: each a GPU store of its pod's current epoch, while the pod has had
// no epoch change since the version. A member the block names nowhere
// else is only a bit in sc.held. It reports false for a body of no known
// shape.
func (x *Index) summary(sc *matchScratch, body []byte, v uint64) bool {
	if !sc.anyTouched && sc.summaryFast(body, v) {
		return true
	}
	// The long way, rare: a record came before the summary in the block,
	// or the summary names a candidate twice or is of no known shape.
	anyVer := v < sc.maxVer // some candidate's epoch changed since v
	return summaryMembers(body, func(num uint32) {
		c := sc.candOf(num)
		if c < 0 || anyVer && sc.ver[c] > v || sc.hold(c) {
			return
		}
		sc.touch(c) // named twice in the block: counted
		sc.count[c][kvindex.TierGPU]++
		if sc.spec[c].pending != 0 {
			sc.spec[c] = specState{} // confirmed, as a store is
		}
	})
}

// summaryFast adds a summary's members to sc.held when no record of the
// block has named a candidate yet: the members' bits are kept from the
// last summary with the same body (the blocks of a prefix every pod holds
// share one), and filtered by version only when a candidate's epoch
// changed since v. It reports false, having changed nothing but the memo,
// for a body of no known shape, one naming a candidate twice or one naming
// a candidate held already: the long way counts those.
func (sc *matchScratch) summaryFast(body []byte, v uint64) bool {
	m := &sc.memo
	if !m.ok || !bytes.Equal(body, m.body) {
		if m.ok = sc.summaryBits(body, m.bits); !m.ok {
			return false
		}
		m.body = body
	}
	if v < sc.maxVer && (!m.verOK || m.v != v) {
		m.verOK, m.v = true, v
		clear(m.verBits)
		for k, cv := range sc.ver {
			if cv <= v {
				m.verBits[k>>6] |= 1 << (k & 63)
			}
		}
	}
	filter := v < sc.maxVer
	for w, h := range sc.held {
		bits := m.bits[w]
		if filter {
			bits &= m.verBits[w]
		}
		if h&bits != 0 {
			return false
		}
	}
	for w := range sc.held {
		bits := m.bits[w]
		if filter {
			bits &= m.verBits[w]
		}
		sc.held[w] |= bits
	}
	return true
}

// summaryBits sets in bits (cleared first) the candidates a summary's body
// names; it reports false for a body of no known shape or one naming a
// candidate twice.
func (sc *matchScratch) summaryBits(body []byte, bits []uint64) bool {
	clear(bits)
	var twice, one uint64 // one: the bits of word 0, kept in a register
	for i, num := 0, uint32(0); ; {
		if i < len(body) && body[i]-1 < 0x7f && uint64(num)+uint64(body[i]) <= 1<<32-1 {
			num += uint32(body[i])
			i++
		} else {
			var end, ok bool
			if num, i, end, ok = summaryNext(body, i, num); !ok || end {
				bits[0] |= one
				return ok && twice == 0
			}
		}
		c := sc.candOf(num)
		switch bit := uint64(1) << (c & 63); {
		case c < 0:
		case c < 64:
			twice |= one & bit
			one |= bit
		default:
			twice |= bits[c>>6] & bit
			bits[c>>6] |= bit
		}
	}
}
