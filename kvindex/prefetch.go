package kvindex

// Prefetching a hash's home slot.
//
// A store, speculation, settling or match of a block starts with a read of
// its hash's home slot, and in an index much larger than the processor's
// caches that read is a miss to main memory, the largest single cost of an
// operation (without prefetching, storing 16 new blocks into a 1M-entry
// index spent about half its time there). A batch's hashes are known before any is processed, so
// the slots of the hashes ahead are requested while the current one is
// worked on, and their misses overlap. A match, which stops at the first
// block no candidate holds, asks prefetchAhead blocks ahead of its walk.
//
// Prefetching reads no memory that Go sees: it is a hint to the processor,
// issued without the shard's lock from the table the shard last published
// (a table is replaced, never changed in size, so any published table is a
// valid address), and a stale hint costs a useless fetch, never a wrong
// answer.

// prefetchAhead is how many hashes ahead of the one being processed a long
// batch, or a match, prefetches.
const prefetchAhead = 8

// publishLocked makes the current table the one prefetching reads.
func (s *shard) publishLocked() {
	t := s.mu.slots
	s.table.Store(&t)
}

// prefetchHome asks the processor to bring hash h's home slot into its
// cache.
func (s *shard) prefetchHome(h uint64) {
	t := *s.table.Load()
	prefetch(&t[home(h, len(t)-1)])
}

// prefetchHomeLocked is prefetchHome with the shard locked.
func (s *shard) prefetchHomeLocked(h uint64) {
	prefetch(&s.mu.slots[home(h, len(s.mu.slots)-1)])
}

// prefetchVictimLocked prefetches the home slot of the shard's least
// recently stored block, which a store into a full shard evicts: its slot is
// read to delete it, and the fetch then overlaps the new hash's lookup.
func (s *shard) prefetchVictimLocked() {
	r := s.oldestLocked(false, 0)
	if r == 0 {
		return
	}
	s.prefetchHomeLocked(s.nodeLocked(s.holderLocked(r).node).hash())
}
