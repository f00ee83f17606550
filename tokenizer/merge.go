package tokenizer

// smallWord is the symbol count up to which merging scans all pairs on every
// step (fast for typical words); longer words use a heap: O(n log n).
const smallWord = 48

// merge applies the model's merges to syms in place, always the pair of
// lowest rank first and the leftmost of equal ranks, and returns the result.
func (b *bpe) merge(syms []uint32) []uint32 {
	if len(syms) > smallWord {
		return b.mergeHeap(syms)
	}
	for len(syms) > 1 {
		best, at := ^uint32(0), -1
		var merged uint32
		for i := 0; i+1 < len(syms); i++ {
			if r, id, ok := b.rank(syms[i], syms[i+1]); ok && r < best {
				best, at, merged = r, i, id
			}
		}
		if at < 0 {
			break
		}
		syms[at] = merged
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	return syms
}

// candidate is a possible merge of the symbol at position key&0xffffffff
// with the next one, made when that position's version was ver. Candidates
// order by key: rank, then position.
type candidate struct {
	key uint64 // rank<<32 | position
	ver uint32
}

// pairHeap is a binary min-heap of candidates.
type pairHeap []candidate

func (h pairHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].key < h[l].key {
			m = r
		}
		if h[i].key <= h[m].key {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].key <= s[i].key {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	*h = s[:n]
	h.down(0)
	return top
}

// mergeHeap is merge for long words: a linked list of symbols and a heap of
// candidate pairs. A position's version changes with its symbol or its
// right neighbor, which makes its older candidates stale.
func (b *bpe) mergeHeap(syms []uint32) []uint32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	ver := make([]uint32, n)
	alive := make([]bool, n)
	h := make(pairHeap, 0, n)
	for i := range n {
		next[i], prev[i], alive[i] = int32(i+1), int32(i-1), true
	}
	next[n-1] = -1
	try := func(l int32) {
		if l < 0 || next[l] < 0 {
			return
		}
		if rank, _, ok := b.rank(syms[l], syms[next[l]]); ok {
			h.push(candidate{key: uint64(rank)<<32 | uint64(l), ver: ver[l]})
		}
	}
	for i := range n - 1 {
		if rank, _, ok := b.rank(syms[i], syms[i+1]); ok {
			h = append(h, candidate{key: uint64(rank)<<32 | uint64(i)})
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	for len(h) > 0 {
		c := h.pop()
		l := int32(uint32(c.key))
		if !alive[l] || ver[l] != c.ver || next[l] < 0 {
			continue
		}
		r := next[l]
		_, id, _ := b.rank(syms[l], syms[r])
		syms[l] = id
		alive[r] = false
		next[l] = next[r]
		if next[r] >= 0 {
			prev[next[r]] = l
		}
		ver[l]++
		if p := prev[l]; p >= 0 {
			ver[p]++
			try(p)
		}
		try(l)
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}
