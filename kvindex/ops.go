package kvindex

// The per-shard operations. Each runs with the shard's lock held; limit is
// the shard's share of Config.MaxEntries.

// opCounts is what a batch of shard operations did, for the metrics.
type opCounts struct {
	added, refreshed, confirmed, evicted, absent, cleared int
}

// findLocked returns pod's record of hash h matching tier and kind
// (speculative or real), or 0.
func (s *shard) findLocked(h uint64, pod uint32, tier Tier, spec bool) ref {
	_, r := s.lookupLocked(h)
	for r != 0 {
		e := s.hotLocked(r)
		if e.pod == pod && (e.flags&flagSpec != 0) == spec && (spec || e.tier == tier) {
			return r
		}
		r = e.next
	}
	return 0
}

// makeRoomLocked frees records until one more fits under limit: expired or,
// when they hold more than half the room, the oldest speculative ones first,
// then the least recently stored real ones.
func (s *shard) makeRoomLocked(limit int, now uint32, n *opCounts) {
	s.expireLocked(now)
	for s.mu.real+s.mu.queued >= limit {
		if s.mu.queued > 0 && (s.mu.queued*2 > limit || s.mu.real == 0) {
			s.specPopLocked()
			continue
		}
		s.removeRealLocked(s.mu.lruOld)
		n.evicted++
	}
}

// expireLocked frees the speculative records whose deadline has passed.
func (s *shard) expireLocked(now uint32) {
	for s.mu.specOld != 0 && expired(s.hotLocked(s.mu.specOld).deadline, now) {
		s.specPopLocked()
	}
}

// expired reports whether deadline is at or before now in wrapping 32-bit
// millisecond time.
func expired(deadline, now uint32) bool {
	return int32(deadline-now) <= 0
}

// storeLocked records that pod stored hash h in tier: a new entry, or one
// more count of an existing one, which also becomes the most recently stored.
// A GPU store confirms the pod's speculative entry for h.
func (s *shard) storeLocked(h uint64, pod uint32, tier Tier, limit int, now uint32, n *opCounts) {
	if tier == TierGPU {
		if r := s.findLocked(h, pod, 0, true); r != 0 {
			s.killSpecLocked(r)
			n.confirmed++
		}
	}
	if r := s.findLocked(h, pod, tier, false); r != 0 {
		if e := s.hotLocked(r); e.count < ^uint16(0) {
			e.count++
		}
		s.lruUnlinkLocked(r)
		s.lruPushLocked(r)
		n.refreshed++
		return
	}
	s.makeRoomLocked(limit, now, n)
	r := s.allocLocked()
	*s.hotLocked(r) = hot{pod: pod, count: 1, tier: tier}
	s.coldLocked(r).hash = h
	s.pushChainLocked(r)
	s.podLinkLocked(r)
	s.lruPushLocked(r)
	s.mu.real++
	n.added++
}

// removeLocked takes one count off pod's entry of h in tier, freeing it at
// zero. An absent entry is counted and ignored.
func (s *shard) removeLocked(h uint64, pod uint32, tier Tier, n *opCounts) {
	r := s.findLocked(h, pod, tier, false)
	if r == 0 {
		n.absent++
		return
	}
	if e := s.hotLocked(r); e.count > 1 {
		e.count--
		return
	}
	s.removeRealLocked(r)
	n.cleared++
}

// speculateLocked records that pod will soon hold h on its GPU, unless it
// already holds it for real or speculatively.
func (s *shard) speculateLocked(h uint64, pod uint32, limit int, now, deadline uint32, n *opCounts) {
	_, r := s.lookupLocked(h)
	for ; r != 0; r = s.hotLocked(r).next {
		if e := s.hotLocked(r); e.pod == pod && (e.flags&flagSpec == 0 || !expired(e.deadline, now)) {
			return
		}
	}
	s.makeRoomLocked(limit, now, n)
	r = s.allocLocked()
	*s.hotLocked(r) = hot{pod: pod, deadline: deadline, tier: TierGPU, flags: flagSpec}
	s.coldLocked(r).hash = h
	s.pushChainLocked(r)
	s.podLinkLocked(r)
	s.specPushLocked(r)
	n.added++
}

// clearPodLocked removes pod's entries in the tiers of mask (bit 1<<tier),
// speculative ones with the GPU tier.
func (s *shard) clearPodLocked(pod uint32, mask uint8, n *opCounts) {
	for r := s.mu.pods[pod].head; r != 0; {
		next := s.coldLocked(r).podNext
		e := s.hotLocked(r)
		if mask&(1<<e.tier) != 0 {
			if e.flags&flagSpec != 0 {
				s.killSpecLocked(r)
			} else {
				s.removeRealLocked(r)
			}
			n.cleared++
		}
		r = next
	}
}

// podEntriesLocked is the number of pod's entries in this shard.
func (s *shard) podEntriesLocked(pod uint32) int {
	return int(s.mu.pods[pod].n)
}
