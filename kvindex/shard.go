package kvindex

import "sync"

// A shard holds the records of the block hashes that map to it. A record is
// one (hash, pod, tier) entry, real or speculative, split into a hot part that
// matches read and a cold part that only writes touch. Records live in
// fixed-size chunks and link to each other by 32-bit refs, so the garbage
// collector never scans them and memory stays flat per entry.
//
// Each record is on up to four lists:
//   - its hash's chain (hot.next), whose head an open-addressing table holds;
//   - its pod's list in this shard (cold.podPrev/podNext), so clearing a pod
//     costs only that pod's entries;
//   - real records: the LRU list by store time (cold.older/newer);
//   - speculative records: the FIFO by deadline (cold.newer), all with the
//     same TTL. A speculative record that is confirmed or cleared becomes dead
//     and leaves every list but the FIFO, which frees it when it reaches the
//     front.
type shard struct {
	mu struct {
		sync.Mutex
		slots            []ref // hash table: head of each hash's chain, 0 = empty
		used             int   // occupied slots
		hot              []*[chunkSize]hot
		cold             []*[chunkSize]cold
		top              uint32 // records handed out from the chunks so far
		free             ref    // free records, linked through hot.next
		lruOld, lruNew   ref    // real records, least recently stored first
		specOld, specNew ref    // speculative records, oldest deadline first
		pods             map[uint32]podList
		real             int // live real records
		queued           int // records in the speculative FIFO, dead ones included
	}
}

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	minSlots  = 64
)

// ref names a record of a shard: its index + 1; 0 is none.
type ref uint32

const (
	flagSpec uint8 = 1 << iota // recorded by a routing decision, not yet confirmed
	flagDead                   // a speculative record waiting in the FIFO to be freed
)

// hot is the part of a record a match reads: 16 bytes, four to a cache line.
type hot struct {
	pod      uint32
	next     ref    // next record of the same hash
	deadline uint32 // speculative records: expiry, ms since the index epoch
	count    uint16 // times stored: vLLM may store one hash twice on a pod
	tier     Tier
	flags    uint8
}

// cold is the rest of a record: the hash and the list links.
type cold struct {
	hash             uint64
	older, newer     ref
	podPrev, podNext ref
}

// podList is a pod's records in one shard.
type podList struct {
	head ref
	n    uint32
}

func newShard() *shard {
	s := &shard{}
	s.mu.slots = make([]ref, minSlots)
	s.mu.pods = make(map[uint32]podList)
	return s
}

func (s *shard) hotLocked(r ref) *hot {
	i := uint32(r - 1)
	return &s.mu.hot[i>>chunkBits][i&(chunkSize-1)]
}

func (s *shard) coldLocked(r ref) *cold {
	i := uint32(r - 1)
	return &s.mu.cold[i>>chunkBits][i&(chunkSize-1)]
}

// allocLocked returns a zeroed record.
func (s *shard) allocLocked() ref {
	if r := s.mu.free; r != 0 {
		h := s.hotLocked(r)
		s.mu.free = h.next
		h.next = 0
		return r
	}
	if s.mu.top == uint32(len(s.mu.hot))*chunkSize {
		s.mu.hot = append(s.mu.hot, new([chunkSize]hot))
		s.mu.cold = append(s.mu.cold, new([chunkSize]cold))
	}
	s.mu.top++
	return ref(s.mu.top)
}

func (s *shard) releaseLocked(r ref) {
	*s.hotLocked(r) = hot{next: s.mu.free}
	*s.coldLocked(r) = cold{}
	s.mu.free = r
}

// home is the table position hash h probes first.
func home(h uint64, mask int) int {
	return int((h*0x9e3779b97f4a7c15)>>32) & mask
}

// lookupLocked returns the table position of hash h and the head of its
// chain, or the empty position where it would go and 0.
func (s *shard) lookupLocked(h uint64) (int, ref) {
	mask := len(s.mu.slots) - 1
	for i := home(h, mask); ; i = (i + 1) & mask {
		r := s.mu.slots[i]
		if r == 0 || s.coldLocked(r).hash == h {
			return i, r
		}
	}
}

// pushChainLocked makes r, whose cold.hash is set, the head of its chain.
func (s *shard) pushChainLocked(r ref) {
	pos, head := s.lookupLocked(s.coldLocked(r).hash)
	s.hotLocked(r).next = head
	s.mu.slots[pos] = r
	if head != 0 {
		return
	}
	s.mu.used++
	if s.mu.used*4 >= len(s.mu.slots)*3 {
		s.resizeLocked(len(s.mu.slots) * 2)
	}
}

func (s *shard) resizeLocked(n int) {
	old := s.mu.slots
	s.mu.slots = make([]ref, n)
	mask := n - 1
	for _, r := range old {
		if r == 0 {
			continue
		}
		i := home(s.coldLocked(r).hash, mask)
		for s.mu.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.mu.slots[i] = r
	}
}

// unchainLocked takes r off its hash's chain.
func (s *shard) unchainLocked(r ref) {
	pos, head := s.lookupLocked(s.coldLocked(r).hash)
	next := s.hotLocked(r).next
	if head == r {
		if next != 0 {
			s.mu.slots[pos] = next
		} else {
			s.deleteSlotLocked(pos)
		}
		return
	}
	for p := head; p != 0; {
		ph := s.hotLocked(p)
		if ph.next == r {
			ph.next = next
			return
		}
		p = ph.next
	}
}

// deleteSlotLocked empties table position i, shifting later entries of the
// probe run back so that lookups still find them.
func (s *shard) deleteSlotLocked(i int) {
	slots := s.mu.slots
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j] != 0; j = (j + 1) & mask {
		k := home(s.coldLocked(slots[j]).hash, mask)
		// Move slots[j] to i unless its home lies cyclically in (i, j].
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i] = 0
	s.mu.used--
}

func (s *shard) lruPushLocked(r ref) {
	c := s.coldLocked(r)
	c.older, c.newer = s.mu.lruNew, 0
	if s.mu.lruNew != 0 {
		s.coldLocked(s.mu.lruNew).newer = r
	} else {
		s.mu.lruOld = r
	}
	s.mu.lruNew = r
}

func (s *shard) lruUnlinkLocked(r ref) {
	c := s.coldLocked(r)
	if c.older != 0 {
		s.coldLocked(c.older).newer = c.newer
	} else {
		s.mu.lruOld = c.newer
	}
	if c.newer != 0 {
		s.coldLocked(c.newer).older = c.older
	} else {
		s.mu.lruNew = c.older
	}
	c.older, c.newer = 0, 0
}

func (s *shard) podLinkLocked(r ref) {
	pod := s.hotLocked(r).pod
	l := s.mu.pods[pod]
	c := s.coldLocked(r)
	c.podPrev, c.podNext = 0, l.head
	if l.head != 0 {
		s.coldLocked(l.head).podPrev = r
	}
	s.mu.pods[pod] = podList{head: r, n: l.n + 1}
}

func (s *shard) podUnlinkLocked(r ref) {
	pod := s.hotLocked(r).pod
	c := s.coldLocked(r)
	l := s.mu.pods[pod]
	if c.podPrev != 0 {
		s.coldLocked(c.podPrev).podNext = c.podNext
	} else {
		l.head = c.podNext
	}
	if c.podNext != 0 {
		s.coldLocked(c.podNext).podPrev = c.podPrev
	}
	c.podPrev, c.podNext = 0, 0
	if l.n--; l.n == 0 {
		delete(s.mu.pods, pod)
	} else {
		s.mu.pods[pod] = l
	}
}

func (s *shard) specPushLocked(r ref) {
	s.coldLocked(r).newer = 0
	if s.mu.specNew != 0 {
		s.coldLocked(s.mu.specNew).newer = r
	} else {
		s.mu.specOld = r
	}
	s.mu.specNew = r
	s.mu.queued++
}

// specPopLocked frees the oldest speculative record, taking it off its chain
// and pod list first unless it is already dead.
func (s *shard) specPopLocked() {
	r := s.mu.specOld
	s.mu.specOld = s.coldLocked(r).newer
	if s.mu.specOld == 0 {
		s.mu.specNew = 0
	}
	if s.hotLocked(r).flags&flagDead == 0 {
		s.unchainLocked(r)
		s.podUnlinkLocked(r)
	}
	s.mu.queued--
	s.releaseLocked(r)
}

// killSpecLocked retires a live speculative record: it leaves its chain and
// pod list now and is freed when the FIFO reaches it.
func (s *shard) killSpecLocked(r ref) {
	s.unchainLocked(r)
	s.podUnlinkLocked(r)
	s.hotLocked(r).flags |= flagDead
}

// removeRealLocked frees a real record.
func (s *shard) removeRealLocked(r ref) {
	s.unchainLocked(r)
	s.podUnlinkLocked(r)
	s.lruUnlinkLocked(r)
	s.mu.real--
	s.releaseLocked(r)
}
