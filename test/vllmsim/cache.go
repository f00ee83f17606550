package vllmsim

import "container/list"

// cache is a pod's GPU prefix cache: block hashes, least recently used
// evicted first.
type cache struct {
	capacity int
	lru      *list.List // of uint64, front = most recent
	at       map[uint64]*list.Element
}

func newCache(capacity int) *cache {
	return &cache{capacity: capacity, lru: list.New(), at: map[uint64]*list.Element{}}
}

// lookup returns how many leading hashes are cached and marks them used.
func (c *cache) lookup(hashes []uint64) int {
	for i, h := range hashes {
		e, ok := c.at[h]
		if !ok {
			return i
		}
		c.lru.MoveToFront(e)
	}
	return len(hashes)
}

// store adds hashes (not cached yet) and returns the hashes it evicted to
// make room, never one of hashes.
func (c *cache) store(hashes []uint64) (evicted []uint64) {
	keep := map[uint64]bool{}
	for _, h := range hashes {
		keep[h] = true
	}
	for _, h := range hashes {
		if _, ok := c.at[h]; ok {
			continue
		}
		for c.lru.Len() >= c.capacity {
			e := c.lru.Back()
			for e != nil && keep[e.Value.(uint64)] {
				e = e.Prev()
			}
			if e == nil {
				return evicted // everything left is this request's
			}
			v := c.lru.Remove(e).(uint64)
			delete(c.at, v)
			evicted = append(evicted, v)
		}
		c.at[h] = c.lru.PushFront(h)
	}
	return evicted
}

func (c *cache) usage() float64 { return float64(c.lru.Len()) / float64(c.capacity) }
