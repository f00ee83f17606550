package kvevents

import (
	"log/slog"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// The reasons a rekeyed pod's block is not in the index under kvrouter's
// hash, or its removal not applied (label values of
// kvrouter_kvevents_rekey_failed_blocks_total).
const (
	rekeyNoTokens       = iota // the event carried no token ids (offloaded tiers, older releases)
	rekeyBlockSize             // the event's block size is not kvrouter's
	rekeyExtraKeys             // extra keys the event does not spell out (multimodal, prompt embeds)
	rekeyParentMissing         // the parent is not in the map: never seen, or fallen out of it
	rekeyRemovalUnknown        // a removed block that is not in the map
	numRekeyReasons
)

var rekeyReasonNames = [numRekeyReasons]string{"no_tokens", "block_size", "extra_keys", "parent_missing", "removal_unknown"}

// rekeyer builds one pod's index entries with kvrouter's own hashes when the
// pod's cannot match them (verification says "mismatch": another
// PYTHONHASHSEED, a random root, an algorithm kvrouter does not reproduce):
// it rehashes every BlockStored event's token ids from the root, or from its
// parent's rehashed digest, and keeps a bounded map from the pod's hashes to
// kvrouter's so that later parents and BlockRemoved events resolve.
//
// Until the pod is verified the map is kept in the shadow of the pod's own
// entries, so that the pod's blocks so far are rekeyed at once when the
// mismatch is concluded; a verified pod keeps no map. It is owned by the
// pod's applier goroutine.
type rekeyer struct {
	h      *blockhash.Hasher
	active bool                    // the pod's index entries are kvrouter's hashes
	blocks map[uint64]rekeyedBlock // the pod's hash → kvrouter's digest
	// ring holds the last len(ring) insertions (and refreshes) in order; the
	// entry a slot names leaves the map when the slot is reused.
	ring     []ringSlot
	next     int
	seq      uint64
	keys     []uint64 // scratch for the index calls
	pod      string
	log      *slog.Logger
	m        *podMetrics
	onChange func(active bool) // nil: nobody listens
	// sizeWarned: a block size that is no multiple of kvrouter's was
	// logged.
	sizeWarned bool
}

// rekeyedBlock is one block of the map: kvrouter's digest and the tiers the
// index holds it in.
type rekeyedBlock struct {
	d     blockhash.Digest
	tiers uint8  // bit t: stored in kvindex.Tier t
	seq   uint64 // the insertion whose ring slot keeps it
	// more are kvrouter's hashes of the blocks before d's within the
	// pod's block, when it holds several of kvrouter's (an engine's
	// 32-token block is two 16-token blocks); nil when one.
	more []uint64
}

// ringSlot names the entry of one insertion.
type ringSlot struct{ hash, seq uint64 }

// newRekeyer returns the rekeyer of one pod, or nil when rekeying is off (no
// hasher, or Config.RekeyBlocks is 0).
func newRekeyer(cfg *Config, h *blockhash.Hasher, pod string, log *slog.Logger, m *podMetrics) *rekeyer {
	if h == nil || cfg.RekeyBlocks <= 0 {
		return nil
	}
	return &rekeyer{
		h: h, blocks: make(map[uint64]rekeyedBlock), ring: make([]ringSlot, cfg.RekeyBlocks),
		pod: pod, log: log, m: m,
	}
}

// stored records the blocks of e it can rehash and returns their kvrouter
// hashes, in order: all of e's blocks, or those before the first that cannot
// be rehashed (counted while active). A block of a multiple of kvrouter's
// block size is that many of kvrouter's blocks.
func (r *rekeyer) stored(e *wire.Event) []uint64 {
	r.keys = r.keys[:0]
	bs := r.h.BlockSize()
	switch {
	case !e.TokensMatch():
		r.fail(rekeyNoTokens, len(e.Hashes))
		return nil
	case e.BlockSize%bs != 0:
		r.refuseSize(e.BlockSize)
		r.fail(rekeyBlockSize, len(e.Hashes))
		return nil
	}
	parent, first := r.h.Root(), true
	if e.HasParent {
		b, ok := r.blocks[e.Parent]
		if !ok {
			r.fail(rekeyParentMissing, len(e.Hashes))
			return nil
		}
		parent, first = b.d, false
		if r.seq-b.seq >= uint64(len(r.ring)/4) {
			// A parent in use stays in the map: refreshed once it is
			// older than a quarter of the ring (each SGLang page names
			// the last), so one reused within the rest is never lost.
			r.insert(e.Parent, b.d, 0, b.more)
		}
	}
	tier := uint8(1) << e.Tier()
	k := e.BlockSize / bs
	for i, hash := range e.Hashes {
		extra, ok := blockExtra(e, i, first && i == 0)
		if e.MultimodalFrom > 0 && i >= e.MultimodalFrom-1 {
			ok = false // multimodal inputs the event does not spell out
		}
		if !ok {
			r.fail(rekeyExtraKeys, len(e.Hashes)-i)
			break
		}
		var more []uint64
		for j := range k {
			if j > 0 {
				extra.CacheSalt = "" // the salt is the chain's first block's
			}
			at := (i*k + j) * bs
			parent = r.h.Block(parent, first && i == 0 && j == 0, e.Tokens[at:at+bs], extra)
			r.keys = append(r.keys, parent.Value())
			if j < k-1 {
				more = append(more, parent.Value())
			}
		}
		r.insert(hash, parent, tier, more)
	}
	return r.keys
}

// refuseSize logs, once, that the pod's blocks of size tokens cannot be
// cut into kvrouter's.
func (r *rekeyer) refuseSize(size int) {
	if r.sizeWarned || !r.active {
		return
	}
	r.sizeWarned = true
	r.log.Warn("kvevents: the pod's blocks are no multiple of kvrouter's block size: they cannot be indexed (set the engine's page or block size to a multiple of hash.block_size)",
		"pod", r.pod, "block_size", size, "kvrouter_block_size", r.h.BlockSize())
}

// removed returns kvrouter's hashes of the blocks of e the map knows in e's
// tier, forgetting them there; the others are counted while active.
func (r *rekeyer) removed(e *wire.Event) []uint64 {
	r.keys = r.keys[:0]
	tier := uint8(1) << e.Tier()
	unknown := 0
	for _, hash := range e.Hashes {
		b, ok := r.blocks[hash]
		if !ok || b.tiers&tier == 0 {
			unknown++
			continue
		}
		r.keys = append(append(r.keys, b.more...), b.d.Value())
		if b.tiers &^= tier; b.tiers == 0 {
			delete(r.blocks, hash)
		} else {
			r.blocks[hash] = b
		}
	}
	r.fail(rekeyRemovalUnknown, unknown)
	return r.keys
}

// insert maps the pod's hash to d (after more) in the tiers of tier
// (adding to those it has), as the newest entry; the entry of the oldest
// insertion leaves the map if it is still there.
func (r *rekeyer) insert(hash uint64, d blockhash.Digest, tier uint8, more []uint64) {
	tiers := r.blocks[hash].tiers | tier
	old := r.ring[r.next]
	if b, ok := r.blocks[old.hash]; ok && b.seq == old.seq && old.seq != 0 && old.hash != hash {
		delete(r.blocks, old.hash)
		if r.active {
			r.m.rekeyEvicted.Inc()
		}
	}
	r.seq++
	r.blocks[hash] = rekeyedBlock{d: d, tiers: tiers, seq: r.seq, more: more}
	r.ring[r.next] = ringSlot{hash: hash, seq: r.seq}
	r.next = (r.next + 1) % len(r.ring)
}

// fail counts n blocks that could not be rekeyed for reason, while active.
func (r *rekeyer) fail(reason, n int) {
	if r.active && n > 0 {
		r.m.rekeyFailed[reason].Add(float64(n))
	}
}

// byTier returns kvrouter's hashes of every block of the map, by tier.
func (r *rekeyer) byTier() [kvindex.NumTiers][]uint64 {
	var out [kvindex.NumTiers][]uint64
	for _, b := range r.blocks {
		for t := range kvindex.NumTiers {
			if b.tiers&(1<<t) != 0 {
				out[t] = append(append(out[t], b.more...), b.d.Value())
			}
		}
	}
	return out
}

// reset forgets every block, for a pod whose entries were all cleared.
func (r *rekeyer) reset() {
	if len(r.blocks) > 0 {
		clear(r.blocks)
		clear(r.ring)
	}
	r.next = 0
}

// follow keys the pod's blocks by kvrouter's hashes from the start, for
// an engine whose block ids are its own (SGLang, TensorRT-LLM).
func (r *rekeyer) follow(engine string) {
	r.active = true
	r.m.rekeyed.Set(1)
	r.log.Info("kvevents: indexing the engine's blocks under kvrouter's hashes of their token ids", "pod", r.pod, "engine", engine)
	if r.onChange != nil {
		r.onChange(true)
	}
}

// setActive records whether the pod's entries are kvrouter's hashes and
// logs the change.
func (r *rekeyer) setActive(active bool) {
	if active == r.active {
		return
	}
	r.active = active
	if active {
		r.m.rekeyed.Set(1)
		r.log.Warn("kvevents: rekeying the pod's blocks with kvrouter's hashes of their token ids; blocks with cache_salt or multimodal inputs the events do not spell out cannot be rekeyed",
			"pod", r.pod, "blocks", len(r.blocks))
	} else {
		r.m.rekeyed.Set(0)
		r.log.Info("kvevents: the pod's blocks are keyed by its own hashes again", "pod", r.pod)
	}
	if r.onChange != nil {
		r.onChange(active)
	}
}
