package kvindex

// The per-shard operations. Each runs with the shard's lock held; limit is
// the shard's share of Config.MaxEntries.

// opCounts is what a batch of shard operations did, for the metrics.
type opCounts struct {
	added, confirmed, evicted, absent, cleared, overflow int
	renewed, settled                                     int // speculative holders given a new deadline
}

// findLocked returns the holder in node nr of the pod in slot sl matching
// kind: speculative (any tier), or real in tier. 0 if none.
func (s *shard) findLocked(nr ref, sl uint32, tier Tier, spec bool) ref {
	nd := s.nodeLocked(nr)
	v := s.vectorLocked(nr)
	for i := range v {
		if h := &v[i]; h.slot() == sl && h.spec() == spec && (spec || h.tier() == tier) {
			return holderRef(nd.class(), nd.first()+uint32(i))
		}
	}
	return 0
}

// findPodLocked is findLocked by pod ID and hash.
func (s *shard) findPodLocked(h uint64, pod uint32, tier Tier, spec bool) ref {
	sl, ok := s.slotOfLocked(pod)
	if !ok {
		return 0
	}
	if _, nr := s.lookupLocked(h); nr != 0 {
		return s.findLocked(nr, sl, tier, spec)
	}
	return 0
}

// expired reports whether deadline is at or before now in wrapping 32-bit
// millisecond time.
func expired(deadline, now uint32) bool {
	return int32(deadline-now) <= 0
}

// expirePodLocked frees pod's speculative holders whose deadline has passed;
// the holders of each FIFO share one lifetime, so they expire in order.
func (s *shard) expirePodLocked(pod uint32, now uint32) {
	for _, l := range []podList{listPending, listGrace} {
		for {
			sl, ok := s.slotOfLocked(pod)
			if !ok {
				return
			}
			oldest, _ := s.mu.pods[sl].ends(l)
			r := *oldest
			if r == 0 || !expired(s.holderLocked(r).stamp, now) {
				break
			}
			s.dropHolderLocked(r)
		}
	}
}

// expireLocked frees every expired speculative holder of the shard.
func (s *shard) expireLocked(now uint32) {
	for i := range s.mu.pods {
		if ps := &s.mu.pods[i]; ps.n != 0 && (ps.specOld != 0 || ps.graceOld != 0) {
			s.expirePodLocked(uint32(i), now)
		}
	}
}

// makeRoomLocked frees holders until one more fits under limit: the oldest
// speculative ones while they fill more than half the room, else the least
// recently stored real ones. It reports whether it freed any.
func (s *shard) makeRoomLocked(limit int, now uint32, n *opCounts) bool {
	freed := false
	for s.mu.real+s.mu.spec >= limit {
		freed = true
		if s.mu.spec > 0 && (s.mu.spec*2 > limit || s.mu.real == 0) {
			s.dropHolderLocked(s.oldestLocked(true, now))
			continue
		}
		s.dropHolderLocked(s.oldestLocked(false, now))
		n.evicted++
	}
	return freed
}

// oldestLocked returns the shard's least recently stored real holder, or its
// speculative holder with the earliest deadline. Ages are taken in wrapping
// 32-bit arithmetic from the store stamp or from now.
func (s *shard) oldestLocked(spec bool, now uint32) ref {
	if !spec {
		if len(s.mu.oldest) < 2 || s.mu.oldest[1] < 0 {
			return 0
		}
		return s.mu.pods[s.mu.oldest[1]].lruOld
	}
	var best ref
	var bestAge uint32
	for i := range s.mu.pods {
		ps := &s.mu.pods[i]
		for _, r := range []ref{ps.specOld, ps.graceOld} {
			if r == 0 {
				continue
			}
			if age := now - s.holderLocked(r).stamp + 1<<31; best == 0 || age > bestAge { // deadlines lie ahead of now
				best, bestAge = r, age
			}
		}
	}
	return best
}

// storeLocked records that pod stored hash h in tier: a new entry, or one
// more count of an existing one, which also becomes the most recently stored.
// A GPU store confirms the pod's speculative holder of h.
func (s *shard) storeLocked(h uint64, pod uint32, tier Tier, limit int, now uint32, n *opCounts) {
	s.expirePodLocked(pod, now)
	s.mu.stamp++
	if s.mu.real+s.mu.spec >= limit {
		s.prefetchVictimLocked()
	}
	pos, nr := s.lookupLocked(h)
	if _, ok := s.slotOfLocked(pod); ok && nr != 0 {
		specRef, realRef := s.pairLocked(nr, pod, tier)
		if realRef != 0 {
			// Refresh before dropping: a drop moves holders of this node.
			s.refreshLocked(realRef)
			if specRef != 0 && tier == TierGPU {
				s.dropHolderLocked(specRef)
				n.confirmed++
			}
			return
		}
		if specRef != 0 && tier == TierGPU {
			s.dropHolderLocked(specRef)
			n.confirmed++
			pos, nr = s.lookupLocked(h)
		}
	}
	if s.makeRoomLocked(limit, now, n) {
		pos, nr = s.lookupLocked(h)
	}
	if s.addLocked(pos, nr, h, pod, tier, false, s.mu.stamp) {
		s.mu.real++
		n.added++
	} else {
		n.overflow++
	}
}

// pairLocked returns pod's speculative holder and its real holder in tier
// of node nr, each 0 when absent.
func (s *shard) pairLocked(nr ref, pod uint32, tier Tier) (specRef, realRef ref) {
	nd := s.nodeLocked(nr)
	v := s.vectorLocked(nr)
	for i := range v {
		if v[i].slot() != pod {
			continue
		}
		switch r := holderRef(nd.class(), nd.first()+uint32(i)); {
		case v[i].spec():
			specRef = r
		case v[i].tier() == tier:
			realRef = r
		}
	}
	return specRef, realRef
}

// refreshLocked counts one more store of holder r and makes it the pod's
// most recently stored.
func (s *shard) refreshLocked(r ref) {
	h := s.holderLocked(r)
	if c := h.count(); c < countMax {
		h.setCount(c + 1)
	}
	s.unlinkLocked(r)
	h.stamp = s.mu.stamp
	s.linkLocked(r)
}

// addLocked adds a holder of hash h for pod, creating the node, and links it
// on the pod's list; pos and nr are what lookupLocked(h) returns. It reports
// false when the block has no room for another holder.
func (s *shard) addLocked(pos int, nr ref, h uint64, pod uint32, tier Tier, spec bool, stamp uint32) bool {
	if nr == 0 {
		nr = s.addNodeLocked(pos, h)
	}
	r := s.addHolderLocked(nr, holder{word: makeWord(pod, tier, spec, 1), stamp: stamp})
	if r == 0 { // MaxHolders already
		return false
	}
	s.podLocked(pod)
	s.linkLocked(r)
	return true
}

// removeLocked takes one count off pod's entry of h in tier, freeing it at
// zero. An absent entry is counted and ignored.
func (s *shard) removeLocked(h uint64, pod uint32, tier Tier, n *opCounts) {
	r := s.findPodLocked(h, pod, tier, false)
	if r == 0 {
		n.absent++
		return
	}
	if hd := s.holderLocked(r); hd.count() > 1 {
		hd.setCount(hd.count() - 1)
		return
	}
	s.dropHolderLocked(r)
	n.cleared++
}

// speculateLocked records that pod will soon hold h on its GPU. A block the
// pod holds for real gets a speculative holder too: should the pod evict
// it before the request runs, the request computes it again, and the block
// still counts for the pod until then. A speculative holder it already has
// becomes pending again with the new deadline.
func (s *shard) speculateLocked(h uint64, pod uint32, limit int, now, deadline uint32, n *opCounts) {
	s.expirePodLocked(pod, now)
	pos, nr := s.lookupLocked(h)
	if sl, ok := s.slotOfLocked(pod); ok && nr != 0 {
		if spec := s.findLocked(nr, sl, TierGPU, true); spec != 0 {
			s.relistLocked(spec, listPending, deadline)
			n.renewed++
			return
		}
	}
	if s.makeRoomLocked(limit, now, n) {
		pos, nr = s.lookupLocked(h)
	}
	if s.addLocked(pos, nr, h, pod, TierGPU, true, deadline) {
		s.mu.spec++
		n.added++
	} else {
		n.overflow++
	}
}

// settleLocked shortens the deadline of pod's speculative holder of h to
// at most deadline, moving it to the grace FIFO; real holders are left as
// they are.
func (s *shard) settleLocked(h uint64, pod uint32, now, deadline uint32, n *opCounts) {
	s.expirePodLocked(pod, now)
	r := s.findPodLocked(h, pod, TierGPU, true)
	if r == 0 || int32(deadline-s.holderLocked(r).stamp) >= 0 {
		return
	}
	s.relistLocked(r, listGrace, deadline)
	n.settled++
}

// relistLocked moves speculative holder r to the newest end of its pod's
// list l with a new deadline.
func (s *shard) relistLocked(r ref, l podList, deadline uint32) {
	s.unlinkLocked(r)
	h := s.holderLocked(r)
	h.word &^= graceBit
	if l == listGrace {
		h.word |= graceBit
	}
	h.stamp = deadline
	s.linkLocked(r)
}

// clearPodLocked removes pod's holders in the tiers of mask (bit 1<<tier),
// speculative ones with the GPU tier, walking the pod's lists.
func (s *shard) clearPodLocked(pod uint32, mask uint8, n *opCounts) {
	for _, l := range []podList{listLRU, listPending, listGrace} {
		sl, ok := s.slotOfLocked(pod)
		if !ok {
			return
		}
		oldest, _ := s.mu.pods[sl].ends(l)
		r, spec := *oldest, l != listLRU
		for r != 0 {
			h := s.holderLocked(r)
			next := h.newer
			if mask&(1<<h.tier()) == 0 {
				r = next
				continue
			}
			// Dropping r can move the other holders of its node: find next
			// again by what it is when it lives there.
			var nextNode ref
			var nextTier Tier
			if next != 0 {
				if nh := s.holderLocked(next); nh.node == h.node {
					nextNode, nextTier = nh.node, nh.tier()
				}
			}
			s.dropHolderLocked(r)
			n.cleared++
			if nextNode != 0 {
				next = s.findLocked(nextNode, sl, nextTier, spec)
			}
			r = next
		}
	}
}

// podEntriesLocked is the number of pod's holders in this shard.
func (s *shard) podEntriesLocked(pod uint32) int {
	if sl, ok := s.slotOfLocked(pod); ok {
		return int(s.mu.pods[sl].n)
	}
	return 0
}
