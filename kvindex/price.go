package kvindex

// Spot is a leading block of a candidate's match counted off the GPU: held
// in a slower tier only, or only speculatively (Tier SpotSpeculative).
// Matching records them for candidates with a hybrid layout, so that a
// match cut short by the groups can count its tiers again.
type Spot struct {
	Cand  int32 // index of the candidate in the match
	Block int32
	Tier  uint8 // a Tier, or SpotSpeculative
}

// SpotSpeculative is the Tier of a Spot counted only speculatively.
const SpotSpeculative = tierSpec

// PriceGroups cuts each match in out (one per candidate, as Match returns
// them) of a pod whose layout has groups besides full attention to the
// prefix every group serves, and counts its tiers again from spots (the
// match's blocks off the GPU, every one, in any order; the rest of a match
// is on the GPU). Index.Match does this itself; an index that matches
// elsewhere (a shared one) calls it with its own matches, against this
// index's groups.
func (x *Index) PriceGroups(namespace string, hashes []uint64, out []PodMatch, spots []Spot) {
	sc, _ := x.scratch.Get().(*matchScratch)
	if sc == nil {
		sc = &matchScratch{}
	}
	defer x.scratch.Put(sc)
	if !x.layouts(sc, namespace, out) {
		return
	}
	mask, all := x.rlockAll()
	sc.spots = sc.spots[:0]
	for _, s := range spots {
		if s.Cand >= 0 && int(s.Cand) < len(out) && s.Block >= 0 && int(s.Block) < out[s.Cand].Blocks {
			sc.spots = append(sc.spots, s)
		}
	}
	x.price(sc, hashes, out)
	x.runlockShards(mask, all)
}

// layouts fills sc.layout (by candidate): the layouts of the candidates
// serving namespace, reporting whether there are any.
func (x *Index) layouts(sc *matchScratch, namespace string, out []PodMatch) bool {
	x.pods.RLock()
	defer x.pods.RUnlock()
	if n := len(x.pods.info); len(sc.slot) < n {
		sc.slot = make([]int32, n+n/4)
	}
	sc.layout = resize(sc.layout, len(out))
	found := false
	for i, m := range out {
		sc.layout[i] = nil
		if x.checkPodLocked(m.Pod) != nil || x.pods.info[m.Pod.index()].namespace != namespace {
			continue
		}
		if l := x.pods.info[m.Pod.index()].layout; l != nil {
			sc.layout[i], found = l, true
		}
	}
	return found
}

// price cuts the matches of the candidates with a layout (sc.layout) to
// the prefix every group serves. The caller holds every shard's read lock.
func (x *Index) price(sc *matchScratch, hashes []uint64, out []PodMatch) {
	p := &sc.pricer
	p.reset(x, hashes, sc, out)
	for i := range out {
		l := sc.layout[i]
		if l == nil {
			continue
		}
		p.cand = int32(i)
		p.slot = out[i].Pod.index()
		h := p.hit(l, out[i].Blocks)
		if h == out[i].Blocks && l.full {
			continue
		}
		recount(&out[i], h, int32(i), sc.spots)
	}
	for i := range out {
		if sc.layout[i] != nil && int(out[i].Pod.index()) < len(sc.slot) {
			sc.slot[out[i].Pod.index()] = 0
		}
	}
}

// spotsOf sets sc.spots to the blocks off the GPU of the matches in out of
// the candidates with a layout: a second walk, for those of them that have
// any. The caller holds the read locks of the shards of hashes.
func (x *Index) spotsOf(sc *matchScratch, hashes []uint64, out []PodMatch) {
	sc.spots = sc.spots[:0]
	for c, m := range out {
		if sc.layout[c] == nil || m.Tiers[TierGPU] == m.Blocks {
			continue
		}
		pod := m.Pod.index()
		for i := range m.Blocks {
			best := uint8(tierSpec) // the match counted it: speculatively, if no real holder
			for _, hd := range x.holdersLocked(hashes[i]) {
				if hd.slot() == pod && !hd.spec() {
					best = min(best, uint8(hd.tier()))
				}
			}
			if best != uint8(TierGPU) {
				sc.spots = append(sc.spots, Spot{Cand: int32(c), Block: int32(i), Tier: best})
			}
		}
	}
}

// recount sets m to its first blocks blocks, its tiers from spots.
func recount(m *PodMatch, blocks int, cand int32, spots []Spot) {
	*m = PodMatch{Pod: m.Pod, Blocks: blocks}
	gpu := blocks
	for _, s := range spots {
		if s.Cand != cand || int(s.Block) >= blocks || s.Tier == uint8(TierGPU) {
			continue
		}
		gpu--
		if s.Tier == SpotSpeculative {
			m.Speculative++
		} else {
			m.Tiers[s.Tier&tierBits]++
		}
	}
	m.Tiers[TierGPU] = gpu
}

// pricer answers, for one candidate at a time, which blocks each spec of
// its layout holds: a bit per block and candidate, filled from the top of
// the prompt down, 64 blocks at a time, as the hit rules ask.
type pricer struct {
	x       *Index
	hashes  []uint64
	sc      *matchScratch
	n       int // blocks a rule can ask about
	cand    int32
	slot    uint32
	memo    []specMemo
	spec    []uint64 // by candidate: its speculative blocks, a bit each
	stride  int      // words per candidate
	cnt     []uint8  // by candidate: groups of the spec holding the block
	touched []int32  // the candidates cnt counts for
}

// specMemo is what one spec of one layout holds: bits by candidate from
// block lo up.
type specMemo struct {
	l    *layout
	s    int
	lo   int
	bits []uint64
}

func (p *pricer) reset(x *Index, hashes []uint64, sc *matchScratch, out []PodMatch) {
	p.x, p.hashes, p.sc = x, hashes, sc
	p.n = 0
	for i, m := range out {
		if l := sc.layout[i]; l != nil {
			n := m.Blocks
			if !l.full {
				n = len(hashes)
			}
			p.n = max(p.n, n)
			sc.slot[m.Pod.index()] = int32(i + 1)
		}
	}
	p.stride = (p.n + 63) / 64
	p.memo = p.memo[:0]
	p.spec = resize(p.spec, len(out)*p.stride)
	clear(p.spec)
	for _, s := range sc.spots {
		if s.Tier == SpotSpeculative && int(s.Block) < p.n && int(s.Cand) < len(out) {
			p.spec[int(s.Cand)*p.stride+int(s.Block)/64] |= 1 << (s.Block % 64)
		}
	}
	p.cnt = resize(p.cnt, len(out))
	clear(p.cnt)
}

// hit is the prefix, in blocks, that every spec of l serves to the current
// candidate, whose full-attention match is full blocks: vLLM's
// HybridKVCacheCoordinator.find_longest_cache_hit.
func (p *pricer) hit(l *layout, full int) int {
	hit := p.n
	if l.full {
		hit = min(hit, full)
	}
	simple := l.full && len(l.specs) == 1
	for {
		cur := hit
		if l.full {
			cur = min(cur, full)
		}
		for s := range l.specs {
			cur = p.rule(l, s, cur)
		}
		if cur >= hit {
			return hit
		}
		hit = cur
		if simple {
			return hit
		}
	}
}

// rule is spec s's longest hit no longer than limit blocks.
func (p *pricer) rule(l *layout, s, limit int) int {
	sp := &l.specs[s]
	m := p.memoOf(l, s)
	switch sp.kind {
	case GroupMamba:
		for i := limit - 1; i >= 0; i-- {
			if p.held(m, i) {
				return i + 1
			}
		}
		return 0
	default: // GroupSlidingWindow
		run := 0
		for i := limit - 1; i >= 0; i-- {
			if !p.held(m, i) {
				run = 0
				continue
			}
			if run++; run >= sp.need {
				return i + run
			}
		}
		return run
	}
}

func (p *pricer) memoOf(l *layout, s int) *specMemo {
	for i := range p.memo {
		if m := &p.memo[i]; m.l == l && m.s == s {
			return m
		}
	}
	var bits []uint64
	if n := len(p.memo); n < cap(p.memo) {
		bits = p.memo[:n+1][n].bits // reuse the memory of an earlier match
	}
	bits = resize(bits, len(p.sc.layout)*p.stride)
	clear(bits)
	p.memo = append(p.memo, specMemo{l: l, s: s, lo: p.stride * 64, bits: bits})
	return &p.memo[len(p.memo)-1]
}

// held reports whether the current candidate's spec holds block i, or the
// candidate holds it only speculatively.
func (p *pricer) held(m *specMemo, i int) bool {
	w := int(p.cand)*p.stride + i/64
	if p.spec[w]&(1<<(i%64)) != 0 {
		return true
	}
	if i < m.lo {
		p.fill(m, i/64*64)
	}
	return m.bits[w]&(1<<(i%64)) != 0
}

// fill marks the blocks from lo up to m.lo that each candidate of m's
// layout holds in every group of the spec.
func (p *pricer) fill(m *specMemo, lo int) {
	x, sc, groups := p.x, p.sc, m.l.specs[m.s].groups
	now := x.nowMs()
	for i := lo; i < m.lo && i < len(p.hashes); i++ {
		touched := p.touched[:0]
		for gi, g := range groups {
			for _, hd := range x.holdersLocked(GroupKey(p.hashes[i], g)) {
				pod := hd.word >> slotShift
				if int(pod) >= len(sc.slot) || sc.slot[pod] == 0 {
					continue
				}
				c := sc.slot[pod] - 1
				if sc.layout[c] != m.l || int(p.cnt[c]) != gi {
					continue // another layout, or a second holder in this group
				}
				if hd.word&specBit != 0 && expired(hd.stamp, now) {
					continue
				}
				p.cnt[c]++
				if gi == 0 {
					touched = append(touched, c)
				}
			}
		}
		for _, c := range touched {
			if int(p.cnt[c]) == len(groups) {
				m.bits[int(c)*p.stride+i/64] |= 1 << (i % 64)
			}
			p.cnt[c] = 0
		}
		p.touched = touched
	}
	m.lo = lo
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
