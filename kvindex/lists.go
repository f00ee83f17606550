package kvindex

// The per-pod lists of a shard and the moves of holders inside vectors.

// podLocked returns the state of the pod with index sl, making room for it.
func (s *shard) podLocked(sl uint32) *podState {
	if int(sl) >= len(s.mu.pods) {
		s.mu.pods = append(s.mu.pods, make([]podState, int(sl)+1-len(s.mu.pods))...)
	}
	return &s.mu.pods[sl]
}

// slotOfLocked reports whether the pod with index sl has holders here.
func (s *shard) slotOfLocked(sl uint32) (uint32, bool) {
	return sl, int(sl) < len(s.mu.pods) && s.mu.pods[sl].n != 0
}

// ends returns the ends of one of the pod's lists.
func (ps *podState) ends(l podList) (oldest, newest *ref) {
	switch l {
	case listPending:
		return &ps.specOld, &ps.specNew
	case listGrace:
		return &ps.graceOld, &ps.graceNew
	}
	return &ps.lruOld, &ps.lruNew
}

// linkLocked appends holder r at the newest end of its pod's list.
func (s *shard) linkLocked(r ref) {
	h := s.holderLocked(r)
	ps := &s.mu.pods[h.slot()]
	oldest, newest := ps.ends(h.list())
	h.older, h.newer = *newest, 0
	if *newest != 0 {
		s.holderLocked(*newest).newer = r
	} else {
		*oldest = r
		if !h.spec() {
			ps.oldStamp = h.stamp
		}
	}
	*newest = r
	ps.n++
	if h.older == 0 && !h.spec() {
		s.lruHeadLocked(h.slot())
	}
}

// unlinkLocked takes holder r off its pod's list.
func (s *shard) unlinkLocked(r ref) {
	h := s.holderLocked(r)
	ps := &s.mu.pods[h.slot()]
	oldest, newest := ps.ends(h.list())
	if h.older != 0 {
		s.holderLocked(h.older).newer = h.newer
	} else {
		*oldest = h.newer
		if h.newer != 0 && !h.spec() {
			ps.oldStamp = s.holderLocked(h.newer).stamp
		}
	}
	if h.newer != 0 {
		s.holderLocked(h.newer).older = h.older
	} else {
		*newest = h.older
	}
	head := h.older == 0
	h.older, h.newer = 0, 0
	ps.n--
	if head && !h.spec() {
		s.lruHeadLocked(h.slot())
	}
}

// lruHeadLocked records that the head of pod sl's LRU list changed: the
// tree of oldest heads (shard.mu.oldest) is updated on the pod's path.
//
// The tree is a tournament over the pods' slots: leaf n+i is pod i when its
// LRU list is not empty (-1 when it is), each inner node the one of its two
// children whose head is older, so the root is the pod holding the shard's
// least recently stored entry, and an eviction finds it without visiting
// every pod. Two heads compare by their age, the store counter minus their
// stamp: counted in wrapping 32-bit arithmetic, the order of two ages never
// changes as the counter advances (until one of them passes 2^32 stores).
func (s *shard) lruHeadLocked(sl uint32) {
	t := s.mu.oldest
	n := len(t) / 2
	if int(sl) >= n {
		s.rebuildOldestLocked()
		return
	}
	i := n + int(sl)
	t[i] = -1
	if s.mu.pods[sl].lruOld != 0 {
		t[i] = int32(sl)
	}
	for i > 1 {
		i >>= 1
		t[i] = s.olderLocked(t[2*i], t[2*i+1])
	}
}

// rebuildOldestLocked makes the tree of oldest heads anew, sized for every
// pod slot of the shard.
func (s *shard) rebuildOldestLocked() {
	n := 1
	for n < len(s.mu.pods) {
		n *= 2
	}
	t := make([]int32, 2*n)
	for i := range n {
		t[n+i] = -1
		if i < len(s.mu.pods) && s.mu.pods[i].lruOld != 0 {
			t[n+i] = int32(i)
		}
	}
	for i := n - 1; i >= 1; i-- {
		t[i] = s.olderLocked(t[2*i], t[2*i+1])
	}
	s.mu.oldest = t
}

// olderLocked returns whichever of pods a and b (-1: none) has the older
// LRU head; a on a tie.
func (s *shard) olderLocked(a, b int32) int32 {
	switch {
	case b < 0:
		return a
	case a < 0:
		return b
	}
	if s.mu.stamp-s.mu.pods[b].oldStamp > s.mu.stamp-s.mu.pods[a].oldStamp {
		return b
	}
	return a
}

// movedLocked points the list neighbors of a holder that was copied to r
// at its new place.
func (s *shard) movedLocked(r ref) {
	h := s.holderLocked(r)
	oldest, newest := s.mu.pods[h.slot()].ends(h.list())
	if h.older != 0 {
		s.holderLocked(h.older).newer = r
	} else {
		*oldest = r
	}
	if h.newer != 0 {
		s.holderLocked(h.newer).older = r
	} else {
		*newest = r
	}
}

// addHolderLocked appends hd to node nr's vector, growing it, and returns
// the holder's ref, or 0 when the block already has MaxHolders holders.
func (s *shard) addHolderLocked(nr ref, hd holder) ref {
	nd := s.nodeLocked(nr)
	n := inUse(s.capacityLocked(nd))
	if n == 1<<nd.class() {
		if nd.class() == numClasses-1 {
			return 0
		}
		s.moveVectorLocked(nr, nd.class()+1)
	}
	r := holderRef(nd.class(), nd.first()+uint32(n))
	hd.node = nr
	*s.holderLocked(r) = hd
	return r
}

// moveVectorLocked moves node nr's holders to a vector of another class.
func (s *shard) moveVectorLocked(nr ref, class uint8) {
	nd := s.nodeLocked(nr)
	v := s.allocVectorLocked(class)
	c := &s.mu.classes[class]
	n := uint32(copy(c.chunks[v>>chunkBits][v&(chunkSize-1):], s.vectorLocked(nr)))
	oldClass, oldVec := nd.class(), nd.first()
	nd.setVector(class, v)
	// Links between holders of this node point into the old vector: move
	// them first, then point the other neighbors at the new places.
	moved := func(r ref) ref {
		i := uint32(r&indexMask) - 1
		if r == 0 || uint8(r>>classShift) != oldClass || i < oldVec || i >= oldVec+n {
			return r
		}
		return holderRef(class, v+i-oldVec)
	}
	for i := range n {
		h := s.holderLocked(holderRef(class, v+i))
		h.older, h.newer = moved(h.older), moved(h.newer)
	}
	for i := range n {
		s.movedLocked(holderRef(class, v+i))
	}
	s.freeVectorLocked(oldClass, oldVec)
}

// dropHolderLocked removes holder r from its pod's list and its node,
// freeing the node when it empties and the pod's slot when it has no
// holders left. Refs to other holders of the same node may change.
func (s *shard) dropHolderLocked(r ref) {
	s.unlinkLocked(r)
	h := s.holderLocked(r)
	if h.spec() {
		s.mu.spec--
	} else {
		s.mu.real--
	}
	nr := h.node
	nd := s.nodeLocked(nr)
	n := inUse(s.capacityLocked(nd)) - 1 // left once r is gone
	last := holderRef(nd.class(), nd.first()+uint32(n))
	if r != last {
		*h = *s.holderLocked(last)
		s.movedLocked(r)
	}
	*s.holderLocked(last) = holder{}
	switch class := nd.class(); {
	case n == 0:
		s.dropNodeLocked(nr)
	case class > 0 && n <= 1<<class/4:
		s.moveVectorLocked(nr, class-1)
	}
}

// entriesLocked calls fn for each of pod's real holders, oldest first.
func (s *shard) entriesLocked(pod uint32, fn func(hash uint64, tier Tier, count int)) {
	sl, ok := s.slotOfLocked(pod)
	if !ok {
		return
	}
	for r := s.mu.pods[sl].lruOld; r != 0; {
		h := s.holderLocked(r)
		fn(s.nodeLocked(h.node).hash(), h.tier(), int(h.count()))
		r = h.newer
	}
}
