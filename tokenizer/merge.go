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

// candidate is a possible merge of the symbols at left and right.
type candidate struct {
	rank        uint32
	left, right int32
	l, r        uint32 // symbol ids when the candidate was made
}

func (c candidate) less(d candidate) bool {
	return c.rank < d.rank || c.rank == d.rank && c.left < d.left
}

// pairHeap is a binary min-heap of candidates by (rank, left).
type pairHeap []candidate

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
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
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if l+1 < n && s[l+1].less(s[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// mergeHeap is merge for long words: a linked list of symbols and a heap of
// candidate pairs, stale candidates skipped when popped.
func (b *bpe) mergeHeap(syms []uint32) []uint32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
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
		r := next[l]
		if rank, _, ok := b.rank(syms[l], syms[r]); ok {
			h.push(candidate{rank: rank, left: l, right: r, l: syms[l], r: syms[r]})
		}
	}
	for i := range n - 1 {
		try(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		if !alive[c.left] || next[c.left] != c.right || syms[c.left] != c.l || syms[c.right] != c.r {
			continue
		}
		_, id, _ := b.rank(c.l, c.r)
		syms[c.left] = id
		alive[c.right] = false
		next[c.left] = next[c.right]
		if nr := next[c.right]; nr >= 0 {
			prev[nr] = c.left
		}
		try(prev[c.left])
		try(c.left)
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}
