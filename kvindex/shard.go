package kvindex

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// A shard holds the blocks whose hashes map to it. Each block hash has a
// node, found through an open-addressing table, and the node's holders —
// one per (pod, tier) that stores the block, or per pod that will soon hold
// it speculatively — sit side by side in a vector, so a match reads one
// short run of memory per block. Vectors come in power-of-two size classes
// and move to the next class as holders join.
//
// Every holder is also on one list of its pod in this shard: real holders on
// the pod's LRU list by store stamp (so clearing a pod costs only its
// entries, and the least recently stored entry of the shard is the oldest
// head among its pods, which a tree over the pods keeps at hand: see
// lruHeadLocked), speculative ones on one of the pod's two FIFOs by
// deadline: pending (deadline Config.SpeculativeTTL after the decision) or
// grace (Config.SpeculativeGrace after Index.Settle). Each FIFO's entries
// share one lifetime, so appending keeps it in deadline order. Moving a
// holder updates its list neighbors.
//
// Nodes and holders live in fixed-size chunks and refer to each other by
// 32-bit refs: the garbage collector never scans them.
type shard struct {
	bits  slotBits               // immutable
	table atomic.Pointer[[]slot] // mu.slots as last published, for prefetching
	mu    struct {
		sync.RWMutex
		slots   []slot // hash table: node of each hash, 0 = empty
		used    int    // occupied slots
		nodes   slab[node]
		classes [numClasses]classSlab
		pods    []podState // by pod index; a pod without holders here has n = 0
		oldest  []int32    // tournament tree of the pods' LRU heads (lruHeadLocked)
		stamp   uint32     // store counter, for LRU order across pods
		real    int        // real holders
		spec    int        // speculative holders
	}
}

// ref names a node (index + 1) or a holder (class<<classShift | index + 1);
// 0 is none.
type ref uint32

const (
	chunkBits  = 12
	chunkSize  = 1 << chunkBits
	minSlots   = 64
	numClasses = chunkBits + 1 // vectors of 1 to 4096 holders
	classShift = 27
	indexMask  = 1<<classShift - 1
	// MaxHolders is the most (pod, tier) holders one block can have; further
	// stores of that block are ignored.
	MaxHolders = 1 << (numClasses - 1)
)

// node is one block hash of the shard: 12 bytes. Its holders are the
// leading holders of its vector whose word is not zero (that of a holder in
// use never is: it counts at least one store, or is speculative), so the
// node keeps no count.
type node struct {
	lo, hi uint32 // the block hash, in halves: a node is 4-byte aligned
	vec    uint32 // class<<classShift | index of the first holder in the class slab
}

func makeNode(h uint64, class uint8, v uint32) node {
	return node{lo: uint32(h), hi: uint32(h >> 32), vec: uint32(class)<<classShift | v}
}

func (nd *node) hash() uint64 { return uint64(nd.hi)<<32 | uint64(nd.lo) }

// class is the size class of the vector: it holds 1<<class holders.
func (nd *node) class() uint8 { return uint8(nd.vec >> classShift) }

// first is the index of the vector's first holder in its class slab.
func (nd *node) first() uint32 { return nd.vec & indexMask }

func (nd *node) setVector(class uint8, v uint32) { nd.vec = uint32(class)<<classShift | v }

// holder is one (pod, tier) that holds a block, or a pod that will soon hold
// it speculatively: 20 bytes.
type holder struct {
	word         uint32 // pod index<<slotShift | count<<countShift | graceBit | specBit | tier
	node         ref    // back to the node
	older, newer ref    // the pod's LRU list (real) or a FIFO (speculative)
	stamp        uint32 // real: store stamp; speculative: deadline
}

const (
	tierBits = 3 // NumTiers fits in two bits
	specBit  = 1 << 2
	// graceBit marks a speculative holder on its pod's grace FIFO.
	graceBit   = 1 << 3
	countShift = 4
	// countMax is where the count of repeated stores of one hash on one pod
	// saturates; vLLM stores a hash at most a few times.
	countMax  = 15
	slotShift = 8
	// maxPods is the most pods an index can hold at once.
	maxPods = 1 << (32 - slotShift)
)

func makeWord(slot uint32, tier Tier, spec bool, count uint32) uint32 {
	w := slot<<slotShift | count<<countShift | uint32(tier)
	if spec {
		w |= specBit
	}
	return w
}

func (h *holder) slot() uint32  { return h.word >> slotShift }
func (h *holder) tier() Tier    { return Tier(h.word & tierBits) }
func (h *holder) spec() bool    { return h.word&specBit != 0 }
func (h *holder) count() uint32 { return h.word >> countShift & countMax }

// list says which of its pod's lists the holder is on.
func (h *holder) list() podList {
	switch {
	case !h.spec():
		return listLRU
	case h.word&graceBit != 0:
		return listGrace
	}
	return listPending
}

// setCount replaces the count, which must be in [0, countMax].
func (h *holder) setCount(c uint32) {
	h.word = h.word&^(countMax<<countShift) | c<<countShift
}

// podState is one pod's lists in a shard.
type podState struct {
	lruOld, lruNew     ref
	specOld, specNew   ref    // pending speculative holders
	graceOld, graceNew ref    // settled speculative holders
	oldStamp           uint32 // stamp of lruOld, for eviction without a pointer chase
	n                  uint32 // holders of the pod in this shard
}

// podList names one of a pod's lists in a shard.
type podList uint8

const (
	listLRU     podList = iota // real holders by store stamp
	listPending                // speculative holders by deadline, requests not yet prefilled
	listGrace                  // speculative holders by deadline, requests prefilled or ended
)

// slab is a chunked array addressed by index.
type slab[T any] struct {
	chunks []*[chunkSize]T
	top    uint32   // elements handed out so far
	free   []uint32 // released elements
}

func (s *slab[T]) at(i uint32) *T { return &s.chunks[i>>chunkBits][i&(chunkSize-1)] }

// alloc returns the index of a zeroed element.
func (s *slab[T]) alloc() uint32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if s.top == uint32(len(s.chunks))*chunkSize {
		s.chunks = append(s.chunks, new([chunkSize]T))
	}
	s.top++
	return s.top - 1
}

func (s *slab[T]) release(i uint32) {
	var zero T
	*s.at(i) = zero
	s.free = append(s.free, i)
}

// classSlab holds the vectors of one size class.
type classSlab struct {
	chunks []*[chunkSize]holder
	top    uint32   // holders handed out so far, a multiple of the class size
	free   []uint32 // first indexes of free vectors
}

func newShard(limit int) *shard {
	s := &shard{bits: newSlotBits(limit)}
	s.mu.slots = make([]slot, minSlots)
	s.publishLocked()
	return s
}

func (s *shard) nodeLocked(r ref) *node { return s.mu.nodes.at(uint32(r - 1)) }

func (s *shard) holderLocked(r ref) *holder {
	c := &s.mu.classes[r>>classShift]
	i := uint32(r&indexMask) - 1
	return &c.chunks[i>>chunkBits][i&(chunkSize-1)]
}

func holderRef(class uint8, i uint32) ref { return ref(class)<<classShift | ref(i+1) }

// vectorLocked returns the holders in use of node r.
func (s *shard) vectorLocked(r ref) []holder {
	v := s.capacityLocked(s.nodeLocked(r))
	return v[:inUse(v)]
}

// capacityLocked returns node nd's whole vector, its holders in use first.
func (s *shard) capacityLocked(nd *node) []holder {
	c := &s.mu.classes[nd.class()]
	v := nd.first()
	off := v & (chunkSize - 1)
	return c.chunks[v>>chunkBits][off : off+1<<nd.class()]
}

// inUse is the number of holders in use of a vector: its leading holders
// with a word.
func inUse(v []holder) int {
	if len(v) <= 8 { // most blocks have a few holders
		for i := range v {
			if v[i].word == 0 {
				return i
			}
		}
		return len(v)
	}
	lo, hi := 0, len(v) // v[:lo] in use, v[hi:] not
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if v[mid].word != 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func (s *shard) allocVectorLocked(class uint8) uint32 {
	c := &s.mu.classes[class]
	if n := len(c.free); n > 0 {
		v := c.free[n-1]
		c.free = c.free[:n-1]
		return v
	}
	if c.top == uint32(len(c.chunks))*chunkSize {
		c.chunks = append(c.chunks, new([chunkSize]holder))
	}
	v := c.top
	c.top += 1 << class
	return v
}

func (s *shard) freeVectorLocked(class uint8, v uint32) {
	c := &s.mu.classes[class]
	clear(c.chunks[v>>chunkBits][v&(chunkSize-1) : v&(chunkSize-1)+1<<class])
	c.free = append(c.free, v)
}

// slot is a hash table entry: a node ref in its low bits, then how far the
// entry sits past its home position, then a tag of the node's hash (see
// slotBits). 0 is empty (refs start at 1).
type slot uint32

// slotBits splits a slot between the node ref (its low refBits bits), the
// entry's distance from its home position (up to maxDispBits bits,
// saturating), and a tag of the node's hash (the rest). Probing compares tags in the table
// itself and dereferences a node only when they agree; deleting an entry
// moves the entries after it back by their distances, reading a node only
// for a distance that saturated. A shard holds at most limit nodes (each
// holds an entry), so refs need bits.Len(limit) bits; with the default 10M
// entries over 64 shards that leaves 4 distance bits and 10 tag bits, and a
// probe past another hash dereferences its node once in 1,024.
type slotBits struct {
	refBits  uint8
	tagShift uint8 // refBits + dispBits
	refMask  uint32
	dispMax  uint32 // a distance of dispMax or more is stored as dispMax
}

// maxDispBits is the room a slot gives the distance from home when its ref
// leaves it: distances of 15 or more (rare below the table's 7/8 load) are
// found by reading the node.
const maxDispBits = 4

func newSlotBits(limit int) slotBits {
	n := uint8(bits.Len32(uint32(limit)))
	d := min(maxDispBits, 32-n)
	return slotBits{refBits: n, tagShift: n + d, refMask: uint32(1)<<n - 1, dispMax: uint32(1)<<d - 1}
}

// slot is the entry of node r with hash h, disp positions past its home.
func (b slotBits) slot(r ref, h uint64, disp int) slot {
	return slot(b.tag(h) | min(uint32(disp), b.dispMax)<<b.refBits | uint32(r))
}

func (b slotBits) tag(h uint64) uint32 {
	if b.tagShift >= 32 {
		return 0
	}
	return uint32(h) << b.tagShift
}

func (b slotBits) ref(s slot) ref { return ref(uint32(s) & b.refMask) }

// disp is the entry's distance from its home position, or dispMax when it
// is that or more.
func (b slotBits) disp(s slot) uint32 { return uint32(s) >> b.refBits & b.dispMax }

// moved is entry s moved back by dist positions from where it had
// distance disp from its home.
func (b slotBits) moved(s slot, disp, dist uint32) slot {
	d := min(disp-dist, b.dispMax)
	return slot(uint32(s)&^(b.dispMax<<b.refBits) | d<<b.refBits)
}

// matches reports whether s may hold hash h: their tags agree.
func (b slotBits) matches(s slot, h uint64) bool {
	return b.tagShift >= 32 || (uint32(s)^b.tag(h))>>b.tagShift == 0
}

// home is the table position hash h probes first.
func home(h uint64, mask int) int {
	return int((h*0x9e3779b97f4a7c15)>>32) & mask
}

// lookupLocked returns the table position of hash h and its node, or the
// empty position where it would go and 0.
func (s *shard) lookupLocked(h uint64) (int, ref) {
	slots := s.mu.slots
	mask := len(slots) - 1
	for i := home(h, mask); ; i = (i + 1) & mask {
		sl := slots[i]
		if sl == 0 {
			return i, 0
		}
		if s.bits.matches(sl, h) && s.nodeLocked(s.bits.ref(sl)).hash() == h {
			return i, s.bits.ref(sl)
		}
	}
}

// addNodeLocked creates the node of hash h at table position pos.
func (s *shard) addNodeLocked(pos int, h uint64) ref {
	r := ref(s.mu.nodes.alloc() + 1)
	*s.nodeLocked(r) = makeNode(h, 0, s.allocVectorLocked(0))
	mask := len(s.mu.slots) - 1
	s.mu.slots[pos] = s.bits.slot(r, h, (pos-home(h, mask))&mask)
	s.mu.used++
	if s.mu.used*8 >= len(s.mu.slots)*7 {
		s.resizeLocked(len(s.mu.slots) * 2)
	}
	return r
}

func (s *shard) resizeLocked(n int) {
	old := s.mu.slots
	s.mu.slots = make([]slot, n)
	s.publishLocked()
	mask := n - 1
	for _, sl := range old {
		if sl == 0 {
			continue
		}
		h := s.nodeLocked(s.bits.ref(sl)).hash()
		k := home(h, mask)
		i := k
		for s.mu.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.mu.slots[i] = s.bits.slot(s.bits.ref(sl), h, (i-k)&mask)
	}
}

// dropNodeLocked frees an empty node and its table slot.
func (s *shard) dropNodeLocked(r ref) {
	nd := s.nodeLocked(r)
	pos, _ := s.lookupLocked(nd.hash())
	s.freeVectorLocked(nd.class(), nd.first())
	s.mu.nodes.release(uint32(r - 1))
	s.deleteSlotLocked(pos)
}

// deleteSlotLocked empties table position i, shifting later entries of the
// probe run back so that lookups still find them.
func (s *shard) deleteSlotLocked(i int) {
	slots := s.mu.slots
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j] != 0; j = (j + 1) & mask {
		sl := slots[j]
		d := s.bits.disp(sl)
		if d == s.bits.dispMax {
			d = uint32((j - home(s.nodeLocked(s.bits.ref(sl)).hash(), mask)) & mask)
		}
		// Move slots[j] to i unless its home lies cyclically in (i, j]:
		// unless it sits fewer than j-i places past its home.
		if dist := uint32((j - i) & mask); d >= dist {
			slots[i] = s.bits.moved(sl, d, dist)
			i = j
		}
	}
	slots[i] = 0
	s.mu.used--
}
