package tokenizer

import (
	"errors"
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// PrefixCache remembers the token ids of recently encoded texts, so that a
// text sharing a long prefix with one of them (the next turn of a growing
// conversation) is encoded from the end of that prefix on: only its new
// text is tokenized. The ids are exactly Encode's, by construction:
//
//   - An encoding resumes only at a mark: a point right after an added token
//     matched in the raw text (a chat template's <|im_start|>, <|eot_id|>, …).
//     Text between such tokens is normalized, pre-tokenized and encoded on
//     its own, so no normalizer, pre-tokenizer split or BPE merge spans a
//     mark, and the post-processor only puts fixed ids around the whole.
//   - A mark is reused only when the new text agrees with the cached one up
//     to the mark's horizon: one past the last byte any decision of the
//     added-token scan up to that token read (trie walks, single_word's look
//     at the next rune, rstrip's look past its whitespace; len+1 when a read
//     ran into the end of the text, see addedSet.splitFrom). Up to the mark
//     the two texts then split alike, into the same stretches, with the same
//     ids, and leave the same scan state.
//   - Resynchronization checks it: the encoding resumes at the mark before
//     the chosen one and must reproduce the chosen mark's state and the
//     cached ids between the two; anything else (which the argument above
//     says cannot happen) is counted and answered by a full encoding.
//
// Cached texts are found by hashes of their first 512, 1024, 2048 and 4096
// bytes and then of every 4 KiB more; a candidate's common prefix with the
// new text is then compared byte by byte, so a hash collision costs a
// lookup, never an id, and the sparse keys cost no reuse once a candidate
// is found. (Keys every 512 bytes made a cold 100k-token prompt pay 1,000
// map insertions and lookups, 5% of its tokenization.)
//
// Reuse is counted in PrefixHit and in Stats, which the router exports as
// kvrouter_tokenizer_prefix_* metrics.
//
// The cache holds at most its budget of bytes (texts, ids, marks, keys and
// what callers attach), evicting the least recently used entries. A text
// extending a cached one replaces it; their common ids are shared, in
// chunks, so storing a conversation's next turn costs memory and
// allocations for its new tokens only (and up to one chunk). It keeps a
// reference to every cached text rather than a copy. A PrefixCache is safe
// for concurrent use.
type PrefixCache struct {
	t      *Tokenizer
	budget int64
	seed   maphash.Seed
	chunk  int // bytes of text between two keys: prefixChunk but in tests

	mu   sync.Mutex
	keys map[uint64]*prefixEntry // prefix hash → most recent entry with that prefix
	lru  prefixEntry             // sentinel: lru.next is the most recently used
	held int64
	ids  int64 // ids held, each shared chunk once
	n    int

	lookups, hits, reused, resyncFails, evictions atomic.Uint64
	scanOnly                                      atomic.Uint64 // windows checked by the scan alone (for tests)
}

const (
	prefixChunk   = 512  // bytes of text before the first key
	keySpread     = 8    // keys are at most keySpread·chunk bytes apart
	idChunkLen    = 4096 // ids per shared chunk
	resyncWindow  = 4096 // most bytes re-encoded to resynchronize
	entryOverhead = 256  // bytes an entry costs beyond its slices
	keyBytes      = 48   // a key in the entry and in the map
	markBytes     = 16
	maxCachedText = 1<<31 - 1
)

// prefixEntry is one cached text and its ids. Everything but the LRU links
// and the attachment is immutable once the entry is published.
type prefixEntry struct {
	text    string
	special bool
	chunks  []*idChunk // the ids, idChunkLen per chunk (the last may be short)
	n       int        // ids, the post-processor's prefix included, its suffix not
	marks   []mark
	keys    []uint64
	attach  any
	attSize int64
	size    int64 // bytes held, shared chunks excluded

	prev, next *prefixEntry
}

// idChunk is a run of ids shared by the entries of one conversation.
type idChunk struct {
	ids  []uint32
	refs int
}

// PrefixStats is what a PrefixCache has done and holds, in the form an
// admin endpoint can print as JSON.
type PrefixStats struct {
	Lookups        uint64 `json:"lookups"`         // encodings through the cache
	Hits           uint64 `json:"hits"`            // of them that reused cached ids
	TokensReused   uint64 `json:"tokens_reused"`   // ids taken from the cache instead of encoded
	ResyncFailures uint64 `json:"resync_failures"` // reuses refused by the resynchronization check
	Evictions      uint64 `json:"evictions"`       // entries dropped for the budget
	Entries        int    `json:"entries"`
	IDs            int64  `json:"token_ids"`    // token ids held (shared ones once)
	Bytes          int64  `json:"bytes"`        // held
	Budget         int64  `json:"budget_bytes"` // the budget (a Registry's: summed over its loaded models)
}

// Add sums two stats (a registry's over its models).
func (s PrefixStats) Add(o PrefixStats) PrefixStats {
	return PrefixStats{
		Lookups: s.Lookups + o.Lookups, Hits: s.Hits + o.Hits, TokensReused: s.TokensReused + o.TokensReused,
		ResyncFailures: s.ResyncFailures + o.ResyncFailures, Evictions: s.Evictions + o.Evictions,
		Entries: s.Entries + o.Entries, IDs: s.IDs + o.IDs, Bytes: s.Bytes + o.Bytes, Budget: s.Budget + o.Budget,
	}
}

// PrefixHit says what an encoding through a PrefixCache reused.
type PrefixHit struct {
	// Reused is the number of leading ids taken from the cache (the
	// post-processor's prefix included); 0 when nothing was.
	Reused int
	// Prev is what was attached to the entry they came from (nil: nothing).
	Prev  any
	entry *prefixEntry // where the encoded text was stored; nil: not stored
}

// NewPrefixCache returns a cache of t's encodings holding at most budget
// bytes.
func NewPrefixCache(t *Tokenizer, budget int64) *PrefixCache {
	c := &PrefixCache{t: t, budget: budget, seed: maphash.MakeSeed(), chunk: prefixChunk, keys: map[uint64]*prefixEntry{}}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// Tokenizer returns the tokenizer whose encodings c caches.
func (c *PrefixCache) Tokenizer() *Tokenizer { return c.t }

// Stats returns what c has done and holds.
func (c *PrefixCache) Stats() PrefixStats {
	c.mu.Lock()
	entries, held, ids := c.n, c.held, c.ids
	c.mu.Unlock()
	return PrefixStats{
		Lookups: c.lookups.Load(), Hits: c.hits.Load(), TokensReused: c.reused.Load(),
		ResyncFailures: c.resyncFails.Load(), Evictions: c.evictions.Load(),
		Entries: entries, IDs: ids, Bytes: held, Budget: c.budget,
	}
}

// Attach keeps v, which takes about size bytes, with the entry the encoding
// that returned h stored; a later encoding reusing that entry's ids finds it
// in PrefixHit.Prev. It does nothing when the entry was not stored or has
// been dropped since.
func (c *PrefixCache) Attach(h PrefixHit, v any, size int64) {
	e := h.entry
	if e == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.next == nil { // dropped
		return
	}
	c.held += size - e.attSize
	e.size += size - e.attSize
	e.attach, e.attSize = v, size
	c.evict(e)
}

// AppendEncode is Tokenizer.AppendEncode through the cache: the ids are the
// same, but a text sharing a prefix with a cached one is encoded from the
// end of that prefix on. The text is then cached.
func (c *PrefixCache) AppendEncode(dst []uint32, text string, addSpecialTokens bool) ([]uint32, PrefixHit, error) {
	return c.AppendEncodeProgress(dst, text, addSpecialTokens, nil)
}

// AppendEncodeProgress is AppendEncode telling progress of the ids final
// so far (see Progress) when the text is encoded from its start, as a
// text sharing no usable prefix with a cached one is.
func (c *PrefixCache) AppendEncodeProgress(dst []uint32, text string, addSpecialTokens bool, progress Progress) ([]uint32, PrefixHit, error) {
	t := c.t
	if !utf8.ValidString(text) || len(text) > maxCachedText {
		out, err := t.AppendEncodeProgress(dst, text, addSpecialTokens, progress)
		return out, PrefixHit{}, err
	}
	c.lookups.Add(1)
	base := len(dst)
	keys := c.textKeys(text, addSpecialTokens)

	c.mu.Lock()
	prev := c.find(keys)
	var att any
	if prev != nil {
		c.touch(prev)
		att = prev.attach
	}
	c.mu.Unlock()

	rec := &recorder{base: base}
	var hit PrefixHit
	var err error
	reused, shared, lcp := 0, 0, 0
	switch {
	case prev != nil && prev.text == text && prev.special == addSpecialTokens:
		// The same text again: its ids, all of them.
		dst = prev.appendIDs(dst, prev.n)
		if addSpecialTokens && t.post != nil {
			dst = append(dst, t.post.suffix...)
		}
		c.hits.Add(1)
		c.reused.Add(uint64(prev.n))
		return dst, PrefixHit{Reused: prev.n, Prev: att, entry: prev}, nil
	case prev != nil:
		lcp = commonPrefix(text, prev.text)
		dst, reused, shared, err = c.resume(dst, text, addSpecialTokens, prev, lcp, rec)
	default:
		dst, err = t.appendEncodeProgress(dst, text, addSpecialTokens, rec, progress)
	}
	if err != nil {
		return dst, PrefixHit{}, err
	}
	if reused > 0 {
		c.hits.Add(1)
		c.reused.Add(uint64(reused))
		hit.Reused, hit.Prev = reused, att
	} else {
		shared = 0
	}
	ids := dst[base:]
	if addSpecialTokens && t.post != nil {
		ids = ids[:len(ids)-len(t.post.suffix)]
	}
	hit.entry = c.store(text, addSpecialTokens, ids, rec.marks, keys, prev, lcp, shared)
	return dst, hit, nil
}

// resume encodes text from the last mark of prev it may reuse, after the
// resynchronization check; without one, or when the check fails, it encodes
// text whole. It returns the ids, how many were reused and how many of
// them are prev's (at most that many can be shared with prev).
func (c *PrefixCache) resume(dst []uint32, text string, special bool, prev *prefixEntry, lcp int, rec *recorder) (out []uint32, reused, shared int, err error) {
	t, base := c.t, len(dst)
	// Marks' horizons grow with their position: the last usable one.
	k := sort.Search(len(prev.marks), func(i int) bool { return int(prev.marks[i].horizon) > lcp }) - 1
	if k < 0 {
		out, err = t.appendEncode(dst, text, special, rec)
		return out, 0, 0, err
	}
	target := prev.marks[k]
	// Resume at the mark before the target (or the text's start) and check
	// that re-encoding the window between them gives the target's state
	// and the cached ids. A window too long to re-encode is checked with
	// the added-token scan alone, and the encoding resumes at the target.
	var start mark // the text's start
	if k > 0 {
		start = prev.marks[k-1]
	}
	from := k - 1
	if target.done-start.done > resyncWindow {
		c.scanOnly.Add(1)
		if !c.scanReaches(text, start.state(), target.state()) {
			c.resyncFails.Add(1)
			out, err = t.appendEncode(dst, text, special, rec)
			return out, 0, 0, err
		}
		start, from = target, k
	}
	if from >= 0 {
		dst = prev.appendIDs(dst, int(start.n))
		rec.marks = append(make([]mark, 0, from+1+64), prev.marks[:from+1]...)
	}
	rec.from = start.state()
	keep := len(rec.marks)
	out, err = t.appendEncode(dst, text, special, rec)
	if err != nil {
		return out, 0, 0, err
	}
	if from != k && !resynced(out[base:], prev, start, target, rec.marks[keep:]) {
		c.resyncFails.Add(1)
		rec.marks, rec.from = rec.marks[:0], scanState{}
		out, err = t.appendEncode(out[:base], text, special, rec)
		return out, 0, 0, err
	}
	return out, int(target.n), int(target.n), nil
}

// resynced reports whether an encoding resumed at start, whose ids are ids
// and which recorded marks, reached target's state with prev's ids between
// the two.
func resynced(ids []uint32, prev *prefixEntry, start, target mark, marks []mark) bool {
	for _, m := range marks {
		if m.done < target.done {
			continue
		}
		return m.i == target.i && m.done == target.done && m.n == target.n &&
			len(ids) >= int(m.n) && prev.equalIDs(ids[:m.n], int(start.n))
	}
	return false
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// scanReaches reports whether the added-token scan of text, resumed at
// from, takes a token leaving exactly state to.
func (c *PrefixCache) scanReaches(text string, from, to scanState) bool {
	reached := false
	_ = c.t.raw.splitFrom(text, from, func(_ string, off int) error {
		if off >= to.done {
			return errStop
		}
		return nil
	}, func(uint32) {}, func(st scanState) {
		if st.done >= to.done && !reached {
			reached = st.i == to.i && st.done == to.done
		}
	})
	return reached
}

// commonPrefix returns the length of the longest common prefix of a and b,
// comparing in blocks first.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	const block = 256
	for i+block <= n && a[i:i+block] == b[i:i+block] {
		i += block
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}
