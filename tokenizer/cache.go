package tokenizer

import (
	"hash/maphash"
	"sync"
)

const (
	maxCachedWord  = 64   // longest word (bytes) the cache keeps
	cacheShards    = 16   // independent locks
	cacheShardSize = 4096 // entries per shard before it is emptied
)

// wordCache remembers the ids of recently encoded words. A full shard is
// emptied rather than evicted entry by entry: cheap, and words that matter
// come back at once.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]struct {
		mu sync.Mutex
		m  map[string][]uint32
	}
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func (c *wordCache) shard(w string) int {
	return int(maphash.String(c.seed, w) % cacheShards)
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	s := &c.shards[c.shard(w)]
	s.mu.Lock()
	ids, ok := s.m[w]
	s.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	s := &c.shards[c.shard(w)]
	v := append([]uint32(nil), ids...)
	s.mu.Lock()
	if len(s.m) >= cacheShardSize {
		clear(s.m)
	}
	s.m[string([]byte(w))] = v
	s.mu.Unlock()
}
