package fleetsim

// cache is one pod's GPU KV cache with vLLM's prefix-caching semantics.
// Blocks of running requests are referenced; blocks with no reference sit
// on the free queue, oldest first, still cached under their hash until the
// queue hands them out again.
type cache struct {
	blocks []block
	byHash map[uint64]int32
	head   int32 // free queue: head is handed out (evicted) first
	tail   int32
	free   int
	events []kvEvent // since the last drain, in order
}

type block struct {
	hash       uint64
	cached     bool
	ref        int32
	prev, next int32 // free queue links; -1 at the ends
}

// kvEvent is one BlockStored or BlockRemoved of one hash.
type kvEvent struct {
	hash   uint64
	stored bool
}

const none = -1

func newCache(n int) *cache {
	c := &cache{blocks: make([]block, n), byHash: make(map[uint64]int32, n), head: none, tail: none}
	for i := range c.blocks {
		c.blocks[i] = block{prev: none, next: none}
		c.pushFree(int32(i))
	}
	return c
}

func (c *cache) pushFree(i int32) {
	b := &c.blocks[i]
	b.prev, b.next = c.tail, none
	if c.tail != none {
		c.blocks[c.tail].next = i
	} else {
		c.head = i
	}
	c.tail = i
	c.free++
}

func (c *cache) unlinkFree(i int32) {
	b := &c.blocks[i]
	if b.prev != none {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next != none {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = none, none
	c.free--
}

// hits returns how many leading hashes are cached.
func (c *cache) hits(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// has reports whether h is cached.
func (c *cache) has(h uint64) bool {
	_, ok := c.byHash[h]
	return ok
}

// acquire references the cached blocks of hashes (all must be cached),
// taking free ones off the free queue, and appends their ids to dst.
func (c *cache) acquire(dst []int32, hashes []uint64) []int32 {
	for _, h := range hashes {
		i := c.byHash[h]
		if c.blocks[i].ref == 0 {
			c.unlinkFree(i)
		}
		c.blocks[i].ref++
		dst = append(dst, i)
	}
	return dst
}

// allocate appends n fresh blocks to dst, evicting the cached contents of
// the free queue's oldest blocks; false (and nothing taken) when fewer
// than n blocks are free.
func (c *cache) allocate(dst []int32, n int) ([]int32, bool) {
	if n > c.free {
		return dst, false
	}
	for range n {
		i := c.head
		c.unlinkFree(i)
		b := &c.blocks[i]
		if b.cached {
			delete(c.byHash, b.hash)
			b.cached = false
			c.events = append(c.events, kvEvent{hash: b.hash})
		}
		b.ref = 1
		dst = append(dst, i)
	}
	return dst, true
}

// commit caches block i, now full, under hash h. A hash already cached by
// another block stays with that one (vLLM keeps the first).
func (c *cache) commit(i int32, h uint64) {
	if _, ok := c.byHash[h]; ok {
		return
	}
	b := &c.blocks[i]
	b.hash, b.cached = h, true
	c.byHash[h] = i
	c.events = append(c.events, kvEvent{hash: h, stored: true})
}

// release drops a request's references, tail block first, so that of two
// blocks freed together the tail is evicted before the head.
func (c *cache) release(ids []int32) {
	for k := len(ids) - 1; k >= 0; k-- {
		i := ids[k]
		b := &c.blocks[i]
		b.ref--
		if b.ref == 0 {
			c.pushFree(i)
		}
	}
}

// usage is the fraction of blocks referenced by requests, vLLM's
// kv_cache_usage_perc.
func (c *cache) usage() float64 { return 1 - float64(c.free)/float64(len(c.blocks)) }

// drain returns and forgets the events since the last drain.
func (c *cache) drain() []kvEvent {
	ev := c.events
	c.events = nil
	return ev
}
