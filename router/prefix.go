package router

import (
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// digestEvery is how many blocks apart a kept chain keeps its digests: a
// reused chain resumes at the last kept digest within the reused ids and
// rehashes fewer than digestEvery blocks before the new ones.
const digestEvery = 16

// chain is the block hash chain of a prompt, kept with its ids in the
// tokenizer's prefix cache so that the next turn of the conversation
// hashes only its new blocks.
type chain struct {
	hasher  *blockhash.Hasher
	extra   blockhash.Extra
	hashes  []uint64
	digests []blockhash.Digest // digest of block (i+1)·digestEvery − 1
}

// size is about the bytes c holds.
func (c *chain) size() int64 {
	return int64(len(c.hashes))*8 + int64(len(c.digests))*int64(len(blockhash.Digest{})) + 96 + int64(len(c.extra.LoRA)+len(c.extra.CacheSalt))
}

// hashPrefix appends the block hashes of tokens to sc.hashes, reusing
// those of hit's chain up to its ids reused when it was hashed alike, and
// keeps the whole chain with the prompt's entry in cache.
func (r *Router) hashPrefix(tokens []uint32, extra blockhash.Extra, hit tokenizer.PrefixHit, cache *tokenizer.PrefixCache, sc *scratch) {
	bs := r.hasher.BlockSize()
	start := len(sc.hashes)
	reused := 0 // blocks
	parent, first := r.hasher.Root(), true
	if prev, ok := hit.Prev.(*chain); ok && prev.hasher == r.hasher && sameKeys(prev.extra, extra) {
		blocks := min(hit.Reused/bs, len(prev.hashes), len(tokens)/bs)
		if k := blocks / digestEvery; k > 0 {
			reused = k * digestEvery
			parent, first = prev.digests[k-1], false
			sc.hashes = append(sc.hashes, prev.hashes[:reused]...)
		}
	}
	// sc.digests holds the digests of blocks reused on; those hashed while
	// a prompt encoded from its start was being encoded come first.
	sc.digests = sc.digests[:0]
	next := reused
	if early := sc.early.digests; reused == 0 && len(early) > 0 {
		sc.digests = append(sc.digests, early...)
		next, parent, first = len(early), early[len(early)-1], false
	}
	sc.digests = r.hasher.AppendDigests(sc.digests, parent, first, tokens[next*bs:], extra)
	for _, d := range sc.digests {
		sc.hashes = append(sc.hashes, d.Value())
	}
	if cache == nil {
		return
	}
	c := &chain{hasher: r.hasher, extra: extra, hashes: append([]uint64(nil), sc.hashes[start:]...)}
	n := len(c.hashes) / digestEvery
	c.digests = make([]blockhash.Digest, 0, n)
	if prev, ok := hit.Prev.(*chain); ok && reused > 0 {
		c.digests = append(c.digests, prev.digests[:reused/digestEvery]...)
	}
	for i := len(c.digests); i < n; i++ {
		c.digests = append(c.digests, sc.digests[(i+1)*digestEvery-1-reused])
	}
	cache.Attach(hit, c, c.size())
}

// sameKeys reports whether two prompts' blocks carry the same extra keys:
// the same LoRA and salt, and no multimodal items (a prompt with them is
// not hashed through the prefix cache).
func sameKeys(a, b blockhash.Extra) bool {
	return a.LoRA == b.LoRA && a.CacheSalt == b.CacheSalt && len(a.MM) == 0 && len(b.MM) == 0
}

// earlyHash hashes the full blocks of a prompt's ids as the tokenizer
// tells that they are final, on the routing goroutine, while other cores
// encode the rest of a long prompt (tokenizer.Progress): the hash chain,
// sequential by construction, then mostly overlaps the encoding.
// tokenize continues the chain after its digests.
type earlyHash struct {
	hasher  *blockhash.Hasher
	extra   blockhash.Extra
	digests []blockhash.Digest // of blocks 0, 1, …, chained from the root
	add     tokenizer.Progress // hashes the new full blocks of ids
}

// reset readies h for a prompt hashed with hasher and extra.
func (h *earlyHash) reset(hasher *blockhash.Hasher, extra blockhash.Extra) {
	h.hasher, h.extra, h.digests = hasher, extra, h.digests[:0]
	if h.add == nil {
		h.add = func(ids []uint32) {
			bs := h.hasher.BlockSize()
			k := len(h.digests)
			if len(ids)/bs <= k {
				return
			}
			parent, first := h.hasher.Root(), true
			if k > 0 {
				parent, first = h.digests[k-1], false
			}
			h.digests = h.hasher.AppendDigests(h.digests, parent, first, ids[k*bs:len(ids)/bs*bs], h.extra)
		}
	}
}

// appendHashes appends the 64-bit hashes of ids' full blocks to dst,
// continuing after the blocks hashed early.
func (h *earlyHash) appendHashes(dst []uint64, ids []uint32) []uint64 {
	if len(h.digests) == 0 {
		return h.hasher.AppendHashes(dst, ids, h.extra)
	}
	for _, d := range h.digests {
		dst = append(dst, d.Value())
	}
	k := len(h.digests)
	dst, _ = h.hasher.Extend(dst, h.digests[k-1], false, ids[k*h.hasher.BlockSize():], h.extra)
	return dst
}
