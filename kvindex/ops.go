package kvindex

// The per-shard operations. Each runs with the shard's lock held; limit is
// the shard's share of Config.MaxEntries.

// opCounts is what a batch of shard operations did, for the metrics.
type opCounts struct {
	added, confirmed, evicted, absent, cleared, overflow int
}

// findLocked returns the holder in node nr of the pod in slot sl matching
// kind: speculative (any tier), or real in tier. 0 if none.
func (s *shard) findLocked(nr ref, sl uint32, tier Tier, spec bool) ref {
	nd := s.nodeLocked(nr)
	for i := range s.vectorLocked(nr) {
		r := holderRef(nd.class, nd.vec+uint32(i))
		h := s.holderLocked(r)
		if h.slot() == sl && h.spec() == spec && (spec || h.tier() == tier) {
			return r
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
// all have the same TTL, so they expire in FIFO order.
func (s *shard) expirePodLocked(pod uint32, now uint32) {
	for {
		sl, ok := s.slotOfLocked(pod)
		if !ok {
			return
		}
		r := s.mu.pods[sl].specOld
		if r == 0 || !expired(s.holderLocked(r).stamp, now) {
			return
		}
		s.dropHolderLocked(r)
	}
}

// expireLocked frees every expired speculative holder of the shard.
func (s *shard) expireLocked(now uint32) {
	for i := range s.mu.pods {
		if ps := &s.mu.pods[i]; ps.n != 0 && ps.specOld != 0 {
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
	var best ref
	var bestAge uint32
	for i := range s.mu.pods {
		ps := &s.mu.pods[i]
		r, age := ps.lruOld, s.mu.stamp-ps.oldStamp
		if spec {
			r = ps.specOld
			if r != 0 {
				age = now - s.holderLocked(r).stamp + 1<<31 // deadlines lie ahead of now
			}
		}
		if r != 0 && (best == 0 || age > bestAge) {
			best, bestAge = r, age
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
		switch r := holderRef(nd.class, nd.vec+uint32(i)); {
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
	} else if int(s.nodeLocked(nr).n) == MaxHolders {
		return false
	}
	s.podLocked(pod)
	r := s.addHolderLocked(nr, holder{word: makeWord(pod, tier, spec, 1), stamp: stamp})
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

// speculateLocked records that pod will soon hold h on its GPU, unless it
// already holds it for real or speculatively.
func (s *shard) speculateLocked(h uint64, pod uint32, limit int, now, deadline uint32, n *opCounts) {
	s.expirePodLocked(pod, now)
	pos, nr := s.lookupLocked(h)
	if _, ok := s.slotOfLocked(pod); ok && nr != 0 {
		v := s.vectorLocked(nr)
		for i := range v {
			if v[i].slot() == pod {
				return
			}
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

// clearPodLocked removes pod's holders in the tiers of mask (bit 1<<tier),
// speculative ones with the GPU tier, walking the pod's lists.
func (s *shard) clearPodLocked(pod uint32, mask uint8, n *opCounts) {
	for _, spec := range []bool{false, true} {
		sl, ok := s.slotOfLocked(pod)
		if !ok {
			return
		}
		r := s.mu.pods[sl].lruOld
		if spec {
			r = s.mu.pods[sl].specOld
		}
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
