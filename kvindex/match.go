package kvindex

import "time"

// PodMatch is how much of a request's block sequence one candidate pod holds.
type PodMatch struct {
	Pod PodID
	// Blocks is the number of leading blocks the pod holds, each in some tier
	// or speculatively.
	Blocks int
	// Tiers splits the leading blocks held for real by the fastest tier that
	// holds each.
	Tiers [NumTiers]int
	// Speculative is the number of leading blocks held only speculatively.
	// Blocks = sum(Tiers) + Speculative.
	Speculative int
}

// matchScratch is per-call working memory, pooled so Match does not allocate.
type matchScratch struct {
	slot []int32     // by pod index: candidate + 1, 0 = not a candidate
	c    []candState // by candidate
	// For a match with candidates of hybrid layouts: their layouts (nil for
	// the others), their blocks off the GPU, and the pricer's memory.
	layout []*layout
	spots  []Spot
	hybrid bool
	pricer pricer
}

// candState is one candidate's progress through the blocks.
type candState struct {
	pos   int32 // leading blocks held so far
	last  uint8 // tier that counted the last block, tierSpec if speculative
	tiers [NumTiers]int32
	spec  int32
}

const tierSpec = 0xff

// Match reports, for each candidate in order, how many leading blocks of
// hashes it holds. It stops at the first block no candidate holds. Candidates
// that do not serve namespace, or are unknown, hold nothing. The result is
// appended to out[:0]; with enough capacity Match does not allocate.
func (x *Index) Match(namespace string, hashes []uint64, candidates []PodID, out []PodMatch) []PodMatch {
	start := time.Now()
	sc, _ := x.scratch.Get().(*matchScratch)
	if sc == nil {
		sc = &matchScratch{}
	}
	eligible := x.markCandidates(sc, namespace, candidates)
	best := 0
	out = out[:0]
	if eligible > 0 {
		mask, all := x.rlockShards(hashes)
		if sc.hybrid {
			x.runlockShards(mask, all)
			mask, all = x.rlockAll()
		}
		best = x.matchBlocks(sc, hashes)
		out = sc.report(candidates, out)
		if sc.hybrid {
			x.spotsOf(sc, hashes, out)
			x.price(sc, hashes, out)
			best = 0
			for _, m := range out {
				best = max(best, m.Blocks)
			}
		}
		x.runlockShards(mask, all)
	} else {
		out = sc.report(candidates, out)
	}
	x.scratch.Put(sc)
	x.metrics.matched(len(hashes), best, time.Since(start))
	return out
}

// report appends each candidate's match to out and unmarks it.
func (sc *matchScratch) report(candidates []PodID, out []PodMatch) []PodMatch {
	for i, c := range candidates {
		m := PodMatch{Pod: c}
		if st := &sc.c[i]; st.pos > 0 {
			m.Blocks, m.Speculative = int(st.pos), int(st.spec)
			for t, n := range st.tiers {
				m.Tiers[t] = int(n)
			}
		}
		out = append(out, m)
		if i := c.index(); int(i) < len(sc.slot) {
			sc.slot[i] = 0
		}
	}
	return out
}

// markCandidates fills sc for the live candidates serving namespace and
// returns how many there are. A repeated candidate counts once.
func (x *Index) markCandidates(sc *matchScratch, namespace string, candidates []PodID) int {
	x.pods.RLock()
	defer x.pods.RUnlock()
	if n := len(x.pods.info); len(sc.slot) < n {
		sc.slot = make([]int32, n+n/4)
	}
	if cap(sc.c) < len(candidates) {
		sc.c = make([]candState, len(candidates))
	}
	sc.c = sc.c[:len(candidates)]
	clear(sc.c)
	sc.hybrid, sc.spots = false, sc.spots[:0]
	eligible := 0
	for i, c := range candidates {
		if x.checkPodLocked(c) != nil || sc.slot[c.index()] != 0 {
			continue
		}
		if p := &x.pods.info[c.index()]; p.namespace == namespace {
			sc.slot[c.index()] = int32(i + 1)
			eligible++
			sc.hybrid = sc.hybrid || p.layout != nil
		}
	}
	if sc.hybrid {
		sc.layout = resize(sc.layout, len(candidates))
		for i, c := range candidates {
			sc.layout[i] = nil
			if int(c.index()) < len(sc.slot) && sc.slot[c.index()] == int32(i+1) {
				sc.layout[i] = x.pods.info[c.index()].layout
			}
		}
	}
	return eligible
}

// matchBlocks walks hashes block by block, advancing every candidate that
// holds all blocks so far, and returns the longest match. The caller holds
// the read locks of the shards of hashes. It prefetches the home slot of
// the block prefetchAhead ahead (prefetch.go).
func (x *Index) matchBlocks(sc *matchScratch, hashes []uint64) int {
	now := x.nowMs()
	slot, cands := sc.slot, sc.c
	var next []holder
	if len(hashes) > 0 {
		next = x.vectorOfLocked(hashes[0])
	}
	for i := range hashes {
		holders := next
		// Look the next block up before walking this one: the two chains
		// of memory loads then overlap.
		if i+1 < len(hashes) {
			next = x.vectorOfLocked(hashes[i+1])
		}
		if i+prefetchAhead < len(hashes) {
			x.shardOf(hashes[i+prefetchAhead]).prefetchHomeLocked(hashes[i+prefetchAhead])
		}
		at, advanced := int32(i), 0
		for j := range holders {
			w := holders[j].word
			if w == 0 { // the holders in use end
				break
			}
			p := w >> slotShift
			if int(p) >= len(slot) || slot[p] == 0 {
				continue
			}
			st := &cands[slot[p]-1]
			tier := uint8(w & tierBits)
			if w&specBit != 0 {
				if expired(holders[j].stamp, now) {
					continue
				}
				tier = tierSpec
			}
			switch {
			case st.pos == at: // the pod's first holder of block i
				st.pos++
				advanced++
				st.count(tier, 1)
				st.last = tier
			case st.pos == at+1 && tier < st.last:
				// Another holder of block i in a faster tier, or real where
				// the counted one was speculative.
				st.count(st.last, -1)
				st.count(tier, 1)
				st.last = tier
			}
		}
		if advanced == 0 {
			return i
		}
	}
	return len(hashes)
}

func (st *candState) count(tier uint8, d int32) {
	if tier == tierSpec {
		st.spec += d
	} else {
		st.tiers[tier&tierBits] += d
	}
}

// vectorOfLocked returns the whole vector of hash h, its holders in use
// first (the others have no word); its shard is read-locked.
func (x *Index) vectorOfLocked(h uint64) []holder {
	s := x.shardOf(h)
	if _, nr := s.lookupLocked(h); nr != 0 {
		return s.capacityLocked(s.nodeLocked(nr))
	}
	return nil
}

// holdersLocked returns the holders of hash h; its shard is read-locked.
func (x *Index) holdersLocked(h uint64) []holder {
	v := x.vectorOfLocked(h)
	return v[:inUse(v)]
}

// rlockShards read-locks every shard that holds one of hashes, in shard
// order so that concurrent matches and writers cannot deadlock. A match
// holds its shards for its whole walk: one lock per shard, not per block.
// It returns the set locked, for runlockShards.
func (x *Index) rlockShards(hashes []uint64) (mask uint64, all bool) {
	if len(x.shards) > 64 || len(hashes) >= len(x.shards) {
		for _, s := range x.shards {
			s.mu.RLock()
		}
		return 0, true
	}
	for _, h := range hashes {
		mask |= 1 << x.shardIndex(h)
	}
	for i, s := range x.shards {
		if mask&(1<<i) != 0 {
			s.mu.RLock()
		}
	}
	return mask, false
}

// rlockAll read-locks every shard, for runlockShards(0, true).
func (x *Index) rlockAll() (mask uint64, all bool) {
	for _, s := range x.shards {
		s.mu.RLock()
	}
	return 0, true
}

func (x *Index) runlockShards(mask uint64, all bool) {
	for i, s := range x.shards {
		if all || mask&(1<<i) != 0 {
			s.mu.RUnlock()
		}
	}
}
