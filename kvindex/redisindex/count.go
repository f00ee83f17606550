package redisindex

import (
	"encoding/binary"
	"math/bits"

	"github.com/kvrouter/kvrouter/kvindex"
)

// count walks the blocks in order, extending each candidate's run: per
// block it folds the records of the candidates still running (their real
// records of their current epoch, the count never below zero; their
// speculative records, specState) and advances those holding the block,
// fastest real tier first, speculation only where no real holder counts.
// The candidates running are bits of sc.alive; a candidate a block names
// only in a summary (most blocks, once a key is compacted) is a bit of
// sc.held and advances on the GPU with no more work, one named by a record
// (sc.touched) has its records folded. A candidate whose run ends is
// unmapped from its pod number, so that its records in the blocks after
// cost one lookup. A run's length is noted when it ends, its blocks held
// off the GPU tallied as they come; the rest of it was held on the GPU.
func (x *Index) count(sc *matchScratch, hashes []uint64, out []kvindex.PodMatch) {
	running := sc.startRuns(len(hashes))
	clock, lives := x.now(), x.lives()
	now, bucket := uint64(clock.UnixMilli()), uint64(clock.UnixNano()/int64(readQueuedEvery))
	tagHash := fnv1a(sc.tag)
	for b := 0; b < len(hashes) && running > 0; b++ {
		val := x.blockValue(sc, b, hashes[b], tagHash, bucket)
		bad, stores := x.foldRecords(sc, val, lives)
		if bad > 0 {
			x.metrics.refused.WithLabelValues("record").Add(float64(bad))
		}
		if stores >= compactRead || len(val) >= compactLong {
			x.compactLater(sc.tag, tagHash, hashes[b], bucket)
		}
		running -= sc.advance(b, now)
		sc.anyTouched = false
	}
	sc.report(out)
}

// startRuns readies sc to count over blocks blocks: every candidate found
// in the pod table runs, its run the whole prompt until it ends. It
// returns how many run.
func (sc *matchScratch) startRuns(blocks int) int {
	n := len(sc.names)
	words := (n + 63) / 64
	sc.count = resize(sc.count, n)
	sc.spec = resize(sc.spec, n)
	sc.tally = resize(sc.tally, n)
	sc.runs = resize(sc.runs, n)
	sc.alive = resize(sc.alive, words)
	sc.held = resize(sc.held, words)
	sc.touched = resize(sc.touched, words)
	clear(sc.count)
	clear(sc.spec)
	clear(sc.tally)
	clear(sc.alive)
	clear(sc.held)
	clear(sc.touched)
	sc.memo = summaryMemo{bits: resize(sc.memo.bits, words), verBits: resize(sc.memo.verBits, words)}
	sc.anyTouched = false
	running := 0
	for k := range n {
		sc.runs[k] = 0
		if sc.live[k] {
			sc.alive[k>>6] |= 1 << (k & 63)
			sc.runs[k] = int32(blocks)
			running++
		}
	}
	return running
}

// blockValue is block b's value (hash h) as read, nil for none: a value
// Redis refused, or of no known size, is counted and held by none, and one
// past the holder bound is queued for compaction too.
func (x *Index) blockValue(sc *matchScratch, b int, h, tagHash, bucket uint64) []byte {
	switch sp := sc.vals[b]; sp.n {
	case spanNil:
	case spanType, spanNotBulk: // the group's MGET failed in the server: its blocks are held by none
		x.metrics.refused.WithLabelValues("type").Inc()
	case spanSize:
		x.metrics.refused.WithLabelValues("size").Inc()
	case spanHolders:
		x.metrics.refused.WithLabelValues("holders").Inc()
		// Folded, it may read again: a key whose compactions the
		// queue dropped while appends grew it.
		x.compactLater(sc.tag, tagHash, h, bucket)
	default:
		return sc.arena[sp.off : sp.off+sp.n]
	}
	return nil
}

// foldRecords folds a block's records, val, into the tallies of the
// candidates still running (sc.held, sc.touched, sc.count, sc.spec). It
// returns the records of no known shape (a summary of none ends val) and
// the GPU store records outside a summary, which a compaction would fold.
func (x *Index) foldRecords(sc *matchScratch, val []byte, lives specLives) (bad, stores int) {
	for off := 0; off+recordSize <= len(val); off += recordSize {
		hdr := binary.LittleEndian.Uint64(val[off:])
		kind, delta := uint8(hdr>>32), int8(hdr>>40)
		if kind == kindSummary && hdr>>40 == 0 {
			end := off + recordSize*(1+int(uint32(hdr)))
			if end > len(val) || !x.summary(sc, val[off+recordSize:end], binary.LittleEndian.Uint64(val[off+8:])) {
				bad++
				break // the rest cannot be told from the summary's body
			}
			off = end - recordSize
			continue
		}
		if !knownRecord(kind, delta, hdr>>48 == 0) {
			bad++
			continue
		}
		if kind == uint8(kvindex.TierGPU) && delta == 1 {
			stores++ // a compaction folds it into a summary, or drops it
		}
		c := sc.candOf(uint32(hdr))
		if c < 0 {
			continue // no candidate, or one whose run has ended
		}
		v := binary.LittleEndian.Uint64(val[off+8:])
		if kind == kindSpec {
			sc.touch(c)
			sc.spec[c].apply(delta == specSettle, v, sc.epoch[c], lives)
			continue
		}
		if v < sc.base[c] || v > sc.epoch[c] {
			continue // from before the pod's last clear: it counts for nothing
		}
		if kind == uint8(kvindex.TierGPU) && delta == 1 && sc.hold(c) {
			continue // the first record naming c, a store: held, as a summary's member is
		}
		sc.touch(c)
		t := &sc.count[c][kind]
		*t = max(0, *t+int32(delta))
		if kind == uint8(kvindex.TierGPU) && delta > 0 {
			sc.spec[c] = specState{} // confirmed
		}
	}
	return bad, stores
}

// advance ends at block b the runs of the candidates running that the
// block's folded records hold in no tier, tallies the tier of those held
// off the GPU, and clears the block's bits; it returns how many runs ended.
func (sc *matchScratch) advance(b int, now uint64) (ended int) {
	for w, a := range sc.alive {
		touched := sc.touched[w] & a
		ends := a &^ (sc.held[w] | touched)
		sc.held[w], sc.touched[w] = 0, 0
		for ; touched != 0; touched &= touched - 1 {
			c := int32(w<<6 + bits.TrailingZeros64(touched))
			switch t := sc.tier(c, now); t {
			case kindNone:
				ends |= touched & -touched
			case uint8(kvindex.TierGPU):
			default:
				sc.tally[c][t]++
				if sc.hybrid {
					sc.spot(c, b, t)
				}
			}
		}
		sc.alive[w] = a &^ ends
		for ; ends != 0; ends &= ends - 1 {
			c := int32(w<<6 + bits.TrailingZeros64(ends))
			sc.runs[c] = int32(b)
			sc.unmap(c)
			ended++
		}
	}
	return ended
}

// spot records candidate c's block b tallied off the GPU, in tier t.
func (sc *matchScratch) spot(c int32, b int, t uint8) {
	if t == kindSpec {
		t = kvindex.SpotSpeculative
	}
	sc.spots = append(sc.spots, kvindex.Spot{Cand: int32(sc.cand[c]), Block: int32(b), Tier: t})
}

// report writes each candidate's run to out: its length, its blocks held
// off the GPU by tier, its speculative ones, and the rest on the GPU.
func (sc *matchScratch) report(out []kvindex.PodMatch) {
	for k := range len(sc.names) {
		o, t := &out[sc.cand[k]], &sc.tally[k]
		o.Blocks = int(sc.runs[k])
		gpu := o.Blocks
		for tier := range kvindex.NumTiers {
			if kvindex.Tier(tier) != kvindex.TierGPU {
				o.Tiers[tier] = int(t[tier])
				gpu -= o.Tiers[tier]
			}
		}
		o.Speculative = int(t[kindSpec])
		o.Tiers[kvindex.TierGPU] = gpu - o.Speculative
	}
}

// tier is the fastest tier whose holder the block's folded records of
// candidate c count (kindSpec: a speculative one; kindNone: none), and
// clears them for the next block.
func (sc *matchScratch) tier(c int32, now uint64) uint8 {
	t := uint8(kindNone)
	for tier := range kvindex.NumTiers {
		if sc.count[c][tier] > 0 {
			t = uint8(tier)
			break
		}
	}
	if t == kindNone && sc.spec[c].deadline() > now {
		t = kindSpec
	}
	sc.count[c], sc.spec[c] = [kvindex.NumTiers]int32{}, specState{}
	return t
}

const kindNone = 0xff

// hold puts candidate c in sc.held, a GPU store of the block, if nothing
// in the block named it before, and reports whether it did.
func (sc *matchScratch) hold(c int32) bool {
	w, bit := c>>6, uint64(1)<<(c&63)
	if (sc.held[w]|sc.touched[w])&bit != 0 {
		return false
	}
	sc.held[w] |= bit
	return true
}

// touch moves candidate c from sc.held, where a summary put it, to the
// candidates whose records in this block are folded one by one
// (sc.touched), its summary's store counted.
func (sc *matchScratch) touch(c int32) {
	w, bit := c>>6, uint64(1)<<(c&63)
	if sc.touched[w]&bit != 0 {
		return
	}
	sc.touched[w] |= bit
	sc.anyTouched = true
	if sc.held[w]&bit != 0 {
		sc.held[w] &^= bit
		sc.count[c][kvindex.TierGPU] = 1
	}
}

// unmap takes candidate c's pod number out of the lookup: its records
// no longer count. (A pod table that gave two candidates one number maps
// it to the last: the other's records never counted.)
func (sc *matchScratch) unmap(c int32) {
	num := sc.numOf[c]
	if num >= maxDirectNum {
		if sc.bigNum[num] == c+1 {
			delete(sc.bigNum, num)
		}
	} else if sc.bynum[num] == c+1 {
		sc.bynum[num] = 0
	}
}

func (sc *matchScratch) candOf(num uint32) int32 {
	if num < uint32(len(sc.bynum)) {
		return sc.bynum[num] - 1
	}
	if num < maxDirectNum || len(sc.bigNum) == 0 {
		return -1
	}
	return sc.bigNum[num] - 1
}
