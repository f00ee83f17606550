package tokenizer

import (
	"hash/maphash"
	"math/bits"
)

// textKeys returns the keys of text: hashes of its first chunk, 2·chunk,
// 4·chunk, … bytes, doubling up to keySpread·chunk and then every
// keySpread·chunk bytes (each stretch hashed on its own, chained by
// mixing), with the special-tokens flag.
func (c *PrefixCache) textKeys(text string, special bool) []uint64 {
	if len(text) < c.chunk {
		return nil
	}
	spread := keySpread * c.chunk
	keys := make([]uint64, 0, len(text)/spread+bits.Len(uint(keySpread))+1)
	k := uint64(0x6b767270) // any start
	if special {
		k = ^k
	}
	for off, end := 0, c.chunk; end <= len(text); off, end = end, end+min(end, spread) {
		k = mix64(k ^ maphash.String(c.seed, text[off:end]))
		keys = append(keys, k)
	}
	return keys
}

// mix64 is splitmix64's finalizer: a bijection that spreads every bit.
func mix64(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// find returns the entry sharing the longest prefix with text, to within a
// key, or nil: the deepest key found, searched from the end (the next
// turn of a conversation misses only its last few). c.mu is held.
func (c *PrefixCache) find(keys []uint64) *prefixEntry {
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := c.keys[keys[i]]; ok {
			return e
		}
	}
	return nil
}

// appendIDs appends the first n ids of e to dst.
func (e *prefixEntry) appendIDs(dst []uint32, n int) []uint32 {
	for _, ch := range e.chunks {
		if n <= 0 {
			break
		}
		k := min(n, len(ch.ids))
		dst = append(dst, ch.ids[:k]...)
		n -= k
	}
	return dst
}

// equalIDs reports whether ids[from:] equals e's ids at the same indexes.
func (e *prefixEntry) equalIDs(ids []uint32, from int) bool {
	if len(ids) > e.n {
		return false
	}
	for i := max(from, 0); i < len(ids); i++ {
		if e.chunks[i/idChunkLen].ids[i%idChunkLen] != ids[i] {
			return false
		}
	}
	return true
}

// store caches text with its ids (suffix excluded) and marks, sharing the
// whole chunks of prev's first shared ids, and returns the entry (nil when
// it does not fit the budget). lcp is the length of the prefix text shares
// with prev.
func (c *PrefixCache) store(text string, special bool, ids []uint32, marks []mark, keys []uint64, prev *prefixEntry, lcp, shared int) *prefixEntry {
	if len(keys) == 0 {
		return nil
	}
	e := &prefixEntry{text: text, special: special, n: len(ids), keys: keys}
	e.marks = marks[:len(marks):len(marks)]
	e.size = entryOverhead + int64(len(text)) + int64(len(keys))*keyBytes + int64(len(marks))*markBytes
	whole := 0
	if prev != nil {
		whole = min(shared, prev.n) / idChunkLen
	}
	total := e.size
	for i := whole * idChunkLen; i < len(ids); i += idChunkLen {
		total += int64(min(idChunkLen, len(ids)-i)) * 4
	}
	if total > c.budget {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev != nil && prev.next == nil { // dropped meanwhile: share nothing
		whole = 0
	}
	e.chunks = make([]*idChunk, 0, (len(ids)+idChunkLen-1)/idChunkLen)
	for i := range whole {
		ch := prev.chunks[i]
		ch.refs++
		e.chunks = append(e.chunks, ch)
	}
	for i := whole * idChunkLen; i < len(ids); i += idChunkLen {
		ch := &idChunk{ids: append([]uint32(nil), ids[i:min(i+idChunkLen, len(ids))]...), refs: 1}
		e.chunks = append(e.chunks, ch)
		c.held += int64(len(ch.ids)) * 4
		c.ids += int64(len(ch.ids))
	}
	c.held += e.size
	c.n++
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
	for _, k := range keys {
		c.keys[k] = e
	}
	// A text extending prev's (the next turn) replaces it: any text prev
	// could serve, e serves as far.
	if prev != nil && prev.next != nil && prev.special == special && lcp == len(prev.text) {
		c.drop(prev)
	}
	c.evict(e)
	return e
}

// touch makes e the most recently used. c.mu is held.
func (c *PrefixCache) touch(e *prefixEntry) {
	if e.next == nil {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

// evict drops the least recently used entries other than keep while c
// holds more than its budget. c.mu is held.
func (c *PrefixCache) evict(keep *prefixEntry) {
	for c.held > c.budget {
		e := c.lru.prev
		if e == &c.lru {
			return
		}
		if e == keep {
			if e.prev == &c.lru {
				c.drop(e) // alone and over budget
				c.evictions.Add(1)
				return
			}
			e = e.prev
		}
		c.drop(e)
		c.evictions.Add(1)
	}
}

// drop removes e. c.mu is held.
func (c *PrefixCache) drop(e *prefixEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	for _, k := range e.keys {
		if c.keys[k] == e {
			delete(c.keys, k)
		}
	}
	for _, ch := range e.chunks {
		ch.refs--
		if ch.refs == 0 {
			c.held -= int64(len(ch.ids)) * 4
			c.ids -= int64(len(ch.ids))
		}
	}
	c.held -= e.size
	c.n--
}
