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
	h.older, h.newer = 0, 0
	ps.n--
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
