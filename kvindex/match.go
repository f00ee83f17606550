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
	slot []int32 // by PodID: index of the pod in the result + 1, 0 = not a candidate
	tier []uint8 // by candidate: tier that counted its last block, tierSpec if speculative
}

const tierSpec = 0xff

// Match reports, for each candidate in order, how many leading blocks of
// hashes it holds. It stops at the first block no candidate holds. Candidates
// that do not serve namespace, or are unknown, hold nothing. The result is
// appended to out[:0]; with enough capacity Match does not allocate.
func (x *Index) Match(namespace string, hashes []uint64, candidates []PodID, out []PodMatch) []PodMatch {
	start := time.Now()
	out = out[:0]
	for _, c := range candidates {
		out = append(out, PodMatch{Pod: c})
	}
	sc, _ := x.scratch.Get().(*matchScratch)
	if sc == nil {
		sc = &matchScratch{}
	}
	eligible := x.markCandidates(sc, namespace, candidates)
	best := 0
	if eligible > 0 {
		best = x.matchBlocks(sc, hashes, out)
	}
	for _, c := range candidates {
		if int(c) < len(sc.slot) {
			sc.slot[c] = 0
		}
	}
	x.scratch.Put(sc)
	x.metrics.matched(len(hashes), best, time.Since(start))
	return out
}

// markCandidates fills sc.slot for the live candidates serving namespace and
// returns how many there are. A repeated candidate counts once.
func (x *Index) markCandidates(sc *matchScratch, namespace string, candidates []PodID) int {
	x.pods.RLock()
	defer x.pods.RUnlock()
	if n := len(x.pods.info); len(sc.slot) < n {
		sc.slot = make([]int32, n+n/4)
	}
	if cap(sc.tier) < len(candidates) {
		sc.tier = make([]uint8, len(candidates))
	}
	sc.tier = sc.tier[:len(candidates)]
	eligible := 0
	for i, c := range candidates {
		if int(c) >= len(x.pods.info) || sc.slot[c] != 0 {
			continue
		}
		if p := x.pods.info[c]; p.live && p.namespace == namespace {
			sc.slot[c] = int32(i + 1)
			eligible++
		}
	}
	return eligible
}

// matchBlocks walks hashes block by block, advancing every candidate that
// holds all blocks so far, and returns the longest match.
func (x *Index) matchBlocks(sc *matchScratch, hashes []uint64, out []PodMatch) int {
	now := x.nowMs()
	slot := sc.slot
	for i, h := range hashes {
		advanced := 0
		s := x.shardOf(h)
		s.mu.Lock()
		_, r := s.lookupLocked(h)
		for r != 0 {
			e := s.hotLocked(r)
			r = e.next
			if int(e.pod) >= len(slot) || slot[e.pod] == 0 {
				continue
			}
			k := slot[e.pod] - 1
			m := &out[k]
			spec := e.flags&flagSpec != 0
			switch {
			case spec && expired(e.deadline, now):
			case m.Blocks == i: // the pod's first record of block i
				m.Blocks++
				advanced++
				if spec {
					m.Speculative++
					sc.tier[k] = tierSpec
				} else {
					m.Tiers[e.tier]++
					sc.tier[k] = uint8(e.tier)
				}
			case m.Blocks == i+1 && !spec && uint8(e.tier) < sc.tier[k]:
				// Another record of block i in a faster tier, or real where
				// the counted one was speculative.
				if sc.tier[k] == tierSpec {
					m.Speculative--
				} else {
					m.Tiers[sc.tier[k]]--
				}
				m.Tiers[e.tier]++
				sc.tier[k] = uint8(e.tier)
			}
		}
		s.mu.Unlock()
		if advanced == 0 {
			return i
		}
	}
	return len(hashes)
}
