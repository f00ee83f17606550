package tokenizer

import (
	"hash/maphash"
	"sync"
)

const (
	maxCachedWord  = 64   // longest word (bytes) the cache keeps
	cacheShards    = 16   // independent locks
	cacheShardSize = 4096 // entries per shard before it is emptied
	cacheSlots     = 2 * cacheShardSize
)

// wordCache remembers the ids of recently encoded words. A full shard is
// emptied rather than evicted entry by entry: cheap, and words that matter
// come back at once. It holds no pointers the garbage collector must follow
// (words and ids live in flat arenas, found through an open-addressing table
// of offsets), so a large cache adds nothing to every collection's marking.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu    sync.Mutex
	slots []cacheSlot // cacheSlots long once used; probed linearly
	words []byte      // the cached words, back to back
	ids   []uint32    // their ids, back to back
	n     int         // entries
}

// cacheSlot is one entry; used says it is occupied.
type cacheSlot struct {
	hash       uint64
	word, idAt uint32
	wordLen    uint8 // ≤ maxCachedWord
	nIDs       uint8 // a word of n bytes has at most n ids
	used       bool
}

func newWordCache() *wordCache { return &wordCache{seed: maphash.MakeSeed()} }

// appendCached appends the cached ids of w to dst; ok says w was cached.
func (c *wordCache) appendCached(dst []uint32, w string) (out []uint32, ok bool) {
	h := maphash.String(c.seed, w)
	s := &c.shards[h%cacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, found := s.find(h, w); found {
		e := &s.slots[i]
		return append(dst, s.ids[e.idAt:e.idAt+uint32(e.nIDs)]...), true
	}
	return dst, false
}

// put caches the ids of w (len(w) ≤ maxCachedWord, len(ids) ≤ len(w)).
func (c *wordCache) put(w string, ids []uint32) {
	if len(w) > maxCachedWord || len(ids) > len(w) {
		return
	}
	h := maphash.String(c.seed, w)
	s := &c.shards[h%cacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = make([]cacheSlot, cacheSlots)
	}
	if s.n >= cacheShardSize {
		clear(s.slots)
		s.words, s.ids, s.n = s.words[:0], s.ids[:0], 0
	}
	i, found := s.find(h, w)
	if found {
		return
	}
	s.slots[i] = cacheSlot{
		hash: h, word: uint32(len(s.words)), idAt: uint32(len(s.ids)),
		wordLen: uint8(len(w)), nIDs: uint8(len(ids)), used: true,
	}
	s.words = append(s.words, w...)
	s.ids = append(s.ids, ids...)
	s.n++
}

// find returns the slot of w, or the empty slot where it would go. The
// table is never more than half full, so the probe ends.
func (s *cacheShard) find(h uint64, w string) (int, bool) {
	if s.slots == nil {
		return 0, false
	}
	for i := int(h>>32) & (cacheSlots - 1); ; i = (i + 1) & (cacheSlots - 1) {
		e := &s.slots[i]
		if !e.used {
			return i, false
		}
		if e.hash == h && string(s.words[e.word:e.word+uint32(e.wordLen)]) == w {
			return i, true
		}
	}
}
