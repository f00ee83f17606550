package redisindex

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// maxDirectNum bounds the pod numbers looked up in a slice; larger ones
// (a namespace that has seen a million pod names) go through a map.
const maxDirectNum = 1 << 20

// matchScratch is one match's working memory, pooled.
type matchScratch struct {
	tag        string   // the namespace's
	names      []string // the eligible candidates' names
	cand       []int    // their indexes in out
	bynum      []int32  // pod number → eligible candidate + 1, 0 none
	nums       []uint32 // the entries of bynum the last readTable set, to reset
	bigNum     map[uint32]int32
	epoch      []uint64 // by eligible candidate; 0: not in the pod table
	ver        []uint64 // by eligible candidate: the pod table's version at its last epoch change
	maxVer     uint64   // the largest of ver
	memo       summaryMemo
	live       []bool
	numOf      []uint32                  // by eligible candidate: its pod number
	alive      []uint64                  // bits by candidate: its run still extends
	held       []uint64                  // bits: held on the GPU by the block's first summary or store naming it, named by nothing else yet (and stale bits of runs ended, ignored)
	touched    []uint64                  // bits: named in this block by a record, or twice: its records folded in count
	anyTouched bool                      // a bit of touched is set
	runs       []int32                   // by candidate: its run's length, once it ends
	count      [][kvindex.NumTiers]int32 // by candidate: this block's real tallies (int32: 1,024 records of +127 do not wrap)
	spec       []specState               // by candidate: this block's speculative holder
	tally      [][kindSpec + 1]int32     // by candidate: its run's blocks by tier, speculative last
	members    [][]int32                 // by group: its blocks' indexes, in MGET order
	// arena holds the values read; tab (by eligible candidate) and vals
	// (by block) their spans. tableErr: Redis refused the HMGET.
	arena    []byte
	tab      []span
	vals     []span
	tableErr bool
	// loadSpans are the load table's fields and values, in turn; loadErr:
	// Redis refused the HGETALL. byName maps a candidate's name to its
	// index in out.
	loadSpans []span
	loadErr   bool
	withLoad  bool // read the load table too
	byName    map[string]int32
	keys      []string // the go-redis path's keys of one group
	cmds      []*redis.SliceCmd
	buf       []byte
}

const kindNone = 0xff

// summaryMemo is what summaryFast keeps of the last summary it read in a
// match: its body and members' bits, and the bits of the candidates whose
// pod table entries' versions are at most v.
type summaryMemo struct {
	ok, verOK     bool
	body          []byte
	bits, verBits []uint64
	v             uint64
}

var scratchPool = sync.Pool{New: func() any {
	return &matchScratch{bigNum: map[uint32]int32{}, byName: map[string]int32{}}
}}

// Match reports, for each candidate in order, how many leading blocks of
// hashes it holds, as kvindex.Index.Match does, from Redis: one pipelined
// round trip (the pod table's entries of the candidates and one MGET per
// slot group). While Redis is down it answers from the local view.
func (x *Index) Match(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch) []kvindex.PodMatch {
	out, _ = x.MatchLoad(namespace, hashes, candidates, out, nil)
	return out
}

// MatchLoad is Match that also reports, in peers by candidate, the
// prefill the other replicas routed there and that is not done yet (see
// Charge), read in the same round trip. peers is zero when Redis is down
// or the load is not shared.
func (x *Index) MatchLoad(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch, peers []kvindex.PodLoad) ([]kvindex.PodMatch, []kvindex.PodLoad) {
	peers = resize(peers, len(candidates))
	clear(peers)
	if !x.up.Load() || len(hashes) == 0 {
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out), peers
	}
	start := time.Now()
	sc := scratchPool.Get().(*matchScratch)
	defer scratchPool.Put(sc)
	out = out[:0]
	sc.names, sc.cand = sc.names[:0], sc.cand[:0]
	tag := nsTag(namespace)
	sc.tag = tag
	x.pods.RLock()
	for i, id := range candidates {
		out = append(out, kvindex.PodMatch{Pod: id})
		if ps := x.pods.byID[id]; ps != nil && ps.tag == tag {
			sc.names = append(sc.names, ps.name)
			sc.cand = append(sc.cand, i)
		}
	}
	x.pods.RUnlock()
	if len(sc.names) == 0 {
		return out, peers
	}
	x.groupBlocks(sc, hashes)
	sc.withLoad = peers != nil && !x.cfg.NoSharedLoad
	read := x.readPipe
	if x.raw != nil {
		read = x.readRaw
	}
	if err := read(sc, tag, hashes); err != nil {
		x.failed("match", err)
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out), peers
	}
	if x.readTable(sc) {
		x.count(sc, hashes, out)
	}
	if sc.withLoad {
		x.readLoad(sc, peers)
	}
	x.metrics.rtMatch.Observe(time.Since(start).Seconds())
	return out, peers
}

// groupBlocks spreads the blocks over their slot groups.
func (x *Index) groupBlocks(sc *matchScratch, hashes []uint64) {
	if len(sc.members) != x.cfg.Groups {
		sc.members = make([][]int32, x.cfg.Groups)
	}
	for g := range sc.members {
		sc.members[g] = sc.members[g][:0]
	}
	for i, h := range hashes {
		g := x.group(h)
		sc.members[g] = append(sc.members[g], int32(i))
	}
	sc.arena = sc.arena[:0]
	sc.tab = resize(sc.tab, len(sc.names))
	sc.vals = resize(sc.vals, len(hashes))
	sc.tableErr, sc.loadErr = false, false
	sc.loadSpans = sc.loadSpans[:0]
}

// podEntryMax bounds a pod table value read: longer ones are refused.
const podEntryMax = 64

// readRaw reads the candidates' pod table entries and the blocks' values
// in one round trip on a connection of the raw pool.
func (x *Index) readRaw(sc *matchScratch, tag string, hashes []uint64) error {
	c, err := x.raw.get()
	if err != nil {
		return err
	}
	w := appendArray(c.w[:0], 2+len(sc.names))
	w = appendBulk(w, "HMGET")
	w = appendBulk(w, x.podsKey(tag))
	for _, name := range sc.names {
		w = appendBulk(w, name)
	}
	if sc.withLoad {
		w = appendArray(w, 2)
		w = appendBulk(w, "HGETALL")
		w = appendBulk(w, x.loadKey(tag))
	}
	for _, mem := range sc.members {
		if len(mem) == 0 {
			continue
		}
		w = appendArray(w, 1+len(mem))
		w = appendBulk(w, "MGET")
		for _, b := range mem {
			sc.buf = x.blockKey(sc.buf[:0], tag, hashes[b])
			w = appendBulk(w, sc.buf)
		}
	}
	c.w = w
	if err := c.flush(x.cfg.Timeout); err != nil {
		x.raw.put(c, true)
		return err
	}
	err = x.readRawReplies(c, sc)
	x.raw.put(c, err != nil)
	return err
}

func (x *Index) readRawReplies(c *rawConn, sc *matchScratch) error {
	var re replyError
	n, err := c.readArray()
	switch {
	case errors.As(err, &re):
		sc.tableErr = true
	case err != nil:
		return err
	case n != len(sc.names):
		return errProto
	}
	for i := 0; i < n; i++ {
		if sc.arena, sc.tab[i], err = c.readBulk(sc.arena, podEntryMax, 1); err != nil {
			return err
		}
	}
	if sc.withLoad {
		n, err := c.readArray()
		switch {
		case errors.As(err, &re):
			sc.loadErr = true
		case err != nil:
			return err
		case n%2 != 0:
			return errProto
		}
		for i := 0; i < n; i++ {
			var sp span
			if sc.arena, sp, err = c.readBulk(sc.arena, loadFieldMax, 1); err != nil {
				return err
			}
			sc.loadSpans = append(sc.loadSpans, sp)
		}
	}
	maxLen := x.cfg.MaxHolders * recordSize
	for _, mem := range sc.members {
		if len(mem) == 0 {
			continue
		}
		n, err := c.readArray()
		switch {
		case errors.As(err, &re):
			for _, b := range mem {
				sc.vals[b] = span{n: spanType}
			}
			continue
		case err != nil:
			return err
		case n != len(mem):
			return errProto
		}
		for _, b := range mem {
			if sc.arena, sc.vals[b], err = c.readBulk(sc.arena, maxLen, recordSize); err != nil {
				return err
			}
		}
	}
	return nil
}

// readPipe reads what readRaw reads through go-redis, in one pipeline
// (the cluster client sends one per node, in parallel).
func (x *Index) readPipe(sc *matchScratch, tag string, hashes []uint64) error {
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	table := pipe.HMGet(ctx, x.podsKey(tag), sc.names...)
	var load *redis.MapStringStringCmd
	if sc.withLoad {
		load = pipe.HGetAll(ctx, x.loadKey(tag))
	}
	sc.cmds = sc.cmds[:0]
	for _, mem := range sc.members {
		if len(mem) == 0 {
			sc.cmds = append(sc.cmds, nil)
			continue
		}
		sc.keys = sc.keys[:0]
		for _, b := range mem {
			sc.buf = x.blockKey(sc.buf[:0], tag, hashes[b])
			sc.keys = append(sc.keys, string(sc.buf))
		}
		sc.cmds = append(sc.cmds, pipe.MGet(ctx, sc.keys...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		return err
	}
	if table.Err() != nil {
		sc.tableErr = true
	} else {
		for i, v := range table.Val() {
			sc.tab[i] = x.toArena(sc, v, podEntryMax, 1)
		}
	}
	if load != nil {
		if load.Err() != nil {
			sc.loadErr = true
		}
		for f, v := range load.Val() {
			sc.loadSpans = append(sc.loadSpans, x.toArena(sc, f, loadFieldMax, 1), x.toArena(sc, v, loadFieldMax, 1))
		}
	}
	maxLen := x.cfg.MaxHolders * recordSize
	for g, mem := range sc.members {
		if len(mem) == 0 {
			continue
		}
		vals := sc.cmds[g].Val()
		for j, b := range mem {
			if sc.cmds[g].Err() != nil || len(vals) != len(mem) {
				sc.vals[b] = span{n: spanType}
				continue
			}
			sc.vals[b] = x.toArena(sc, vals[j], maxLen, recordSize)
		}
	}
	return nil
}

// toArena copies one go-redis reply value into the arena, as readBulk
// reads it.
func (x *Index) toArena(sc *matchScratch, v any, limit, mod int) span {
	s, ok := v.(string)
	switch {
	case v == nil:
		return span{n: spanNil}
	case !ok:
		return span{n: spanNotBulk}
	case len(s)%mod != 0:
		return span{n: spanSize}
	case len(s) > limit:
		return span{n: spanHolders}
	}
	off := len(sc.arena)
	sc.arena = append(sc.arena, s...)
	return span{off: int32(off), n: int32(len(s))}
}

// readTable maps the candidates' pod numbers to them and notes their
// epochs. It reports false when the table cannot be read: nothing counts.
func (x *Index) readTable(sc *matchScratch) bool {
	n := len(sc.names)
	sc.epoch = resize(sc.epoch, n)
	sc.live = resize(sc.live, n)
	sc.numOf = resize(sc.numOf, n)
	sc.ver = resize(sc.ver, n)
	// Reset only what the last match set: bynum is as long as the largest
	// pod number seen, which grows with every pod name a namespace sees.
	for _, num := range sc.nums {
		sc.bynum[num] = 0
	}
	sc.nums = sc.nums[:0]
	sc.maxVer = 0
	clear(sc.bigNum)
	if sc.tableErr {
		x.metrics.refused.WithLabelValues("pods").Inc()
		return false
	}
	for i, sp := range sc.tab {
		sc.epoch[i], sc.live[i] = 0, false
		if sp.n == spanNil {
			continue // no writer has numbered the pod: it holds nothing
		}
		var num uint32
		var ep, ver uint64
		ok := sp.n >= 0
		if ok {
			num, ep, ver, ok = parsePodEntry(sc.arena[sp.off : sp.off+sp.n])
		}
		if !ok {
			x.metrics.refused.WithLabelValues("pods").Inc()
			continue
		}
		sc.epoch[i], sc.ver[i], sc.live[i], sc.numOf[i] = ep, ver, true, num
		sc.maxVer = max(sc.maxVer, ver)
		if num < maxDirectNum {
			if int(num) >= len(sc.bynum) {
				sc.bynum = append(sc.bynum, make([]int32, int(num)+1-len(sc.bynum))...)
			}
			sc.bynum[num] = int32(i) + 1
			sc.nums = append(sc.nums, num)
		} else {
			sc.bigNum[num] = int32(i) + 1
		}
	}
	return true
}

// summary counts the members of a summary (kindSummary) of table version
// v: each a GPU store of its pod's current epoch, while the pod has had
// no epoch change since the version. A member the block names nowhere
// else is only a bit in sc.held. It reports false for a body of no known
// shape.
func (x *Index) summary(sc *matchScratch, body []byte, v uint64) bool {
	if !sc.anyTouched && sc.summaryFast(body, v) {
		return true
	}
	// The long way, rare: a record came before the summary in the block,
	// or the summary names a candidate twice or is of no known shape.
	anyVer := v < sc.maxVer // some candidate's epoch changed since v
	return summaryMembers(body, func(num uint32) {
		c := sc.candOf(num)
		if c < 0 || anyVer && sc.ver[c] > v || sc.hold(c) {
			return
		}
		sc.touch(c) // named twice in the block: counted
		sc.count[c][kvindex.TierGPU]++
		if sc.spec[c].pending != 0 {
			sc.spec[c] = specState{} // confirmed, as a store is
		}
	})
}

// summaryFast adds a summary's members to sc.held when no record of the
// block has named a candidate yet: the members' bits are kept from the
// last summary with the same body (the blocks of a prefix every pod holds
// share one), and filtered by version only when a candidate's epoch
// changed since v. It reports false, having changed nothing but the memo,
// for a body of no known shape, one naming a candidate twice or one naming
// a candidate held already: the long way counts those.
func (sc *matchScratch) summaryFast(body []byte, v uint64) bool {
	m := &sc.memo
	if !m.ok || !bytes.Equal(body, m.body) {
		if m.ok = sc.summaryBits(body, m.bits); !m.ok {
			return false
		}
		m.body = body
	}
	if v < sc.maxVer && (!m.verOK || m.v != v) {
		m.verOK, m.v = true, v
		clear(m.verBits)
		for k, cv := range sc.ver {
			if cv <= v {
				m.verBits[k>>6] |= 1 << (k & 63)
			}
		}
	}
	filter := v < sc.maxVer
	for w, h := range sc.held {
		bits := m.bits[w]
		if filter {
			bits &= m.verBits[w]
		}
		if h&bits != 0 {
			return false
		}
	}
	for w := range sc.held {
		bits := m.bits[w]
		if filter {
			bits &= m.verBits[w]
		}
		sc.held[w] |= bits
	}
	return true
}

// summaryBits sets in bits (cleared first) the candidates a summary's body
// names; it reports false for a body of no known shape or one naming a
// candidate twice.
func (sc *matchScratch) summaryBits(body []byte, bits []uint64) bool {
	clear(bits)
	var twice, one uint64 // one: the bits of word 0, kept in a register
	for i, num := 0, uint32(0); ; {
		if i < len(body) && body[i]-1 < 0x7f && uint64(num)+uint64(body[i]) <= 1<<32-1 {
			num += uint32(body[i])
			i++
		} else {
			var end, ok bool
			if num, i, end, ok = summaryNext(body, i, num); !ok || end {
				bits[0] |= one
				return ok && twice == 0
			}
		}
		c := sc.candOf(num)
		switch bit := uint64(1) << (c & 63); {
		case c < 0:
		case c < 64:
			twice |= one & bit
			one |= bit
		default:
			twice |= bits[c>>6] & bit
			bits[c>>6] |= bit
		}
	}
}

// hold puts candidate c in sc.held, a GPU store of the block, if nothing
// in the block named it before, and reports whether it did.
func (sc *matchScratch) hold(c int32) bool {
	w, bit := c>>6, uint64(1)<<(c&63)
	if (sc.held[w]|sc.touched[w])&bit != 0 {
		return false
	}
	sc.held[w] |= bit
	return true
}

// touch moves candidate c from sc.held, where a summary put it, to the
// candidates whose records in this block are folded one by one
// (sc.touched), its summary's store counted.
func (sc *matchScratch) touch(c int32) {
	w, bit := c>>6, uint64(1)<<(c&63)
	if sc.touched[w]&bit != 0 {
		return
	}
	sc.touched[w] |= bit
	sc.anyTouched = true
	if sc.held[w]&bit != 0 {
		sc.held[w] &^= bit
		sc.count[c][kvindex.TierGPU] = 1
	}
}

// unmap takes candidate c's pod number out of the lookup: its records
// no longer count. (A pod table that gave two candidates one number maps
// it to the last: the other's records never counted.)
func (sc *matchScratch) unmap(c int32) {
	num := sc.numOf[c]
	if num >= maxDirectNum {
		if sc.bigNum[num] == c+1 {
			delete(sc.bigNum, num)
		}
	} else if sc.bynum[num] == c+1 {
		sc.bynum[num] = 0
	}
}

func (sc *matchScratch) candOf(num uint32) int32 {
	if num < uint32(len(sc.bynum)) {
		return sc.bynum[num] - 1
	}
	if num < maxDirectNum || len(sc.bigNum) == 0 {
		return -1
	}
	return sc.bigNum[num] - 1
}

// count walks the blocks in order, extending each candidate's run: per
// block it folds the records of the candidates still running (their real
// records of their current epoch, the count never below zero; their
// speculative records, specState) and advances those holding the block,
// fastest real tier first, speculation only where no real holder counts.
// The candidates running are bits of sc.alive; a candidate a block names
// only in a summary (most blocks, once a key is compacted) is a bit of
// sc.held and advances on the GPU with no more work, one named by a record
// (sc.touched) has its records folded. A candidate whose run ends is
// unmapped from its pod number, so that its records in the blocks after
// cost one lookup. A run's length is noted when it ends, its blocks held
// off the GPU tallied as they come; the rest of it was held on the GPU.
func (x *Index) count(sc *matchScratch, hashes []uint64, out []kvindex.PodMatch) {
	n := len(sc.names)
	words := (n + 63) / 64
	sc.count = resize(sc.count, n)
	sc.spec = resize(sc.spec, n)
	sc.tally = resize(sc.tally, n)
	sc.runs = resize(sc.runs, n)
	sc.alive = resize(sc.alive, words)
	sc.held = resize(sc.held, words)
	sc.touched = resize(sc.touched, words)
	clear(sc.count)
	clear(sc.spec)
	clear(sc.tally)
	clear(sc.alive)
	clear(sc.held)
	clear(sc.touched)
	sc.memo = summaryMemo{bits: resize(sc.memo.bits, words), verBits: resize(sc.memo.verBits, words)}
	sc.anyTouched = false
	running := 0
	for k := range n {
		sc.runs[k] = 0
		if sc.live[k] {
			sc.alive[k>>6] |= 1 << (k & 63)
			sc.runs[k] = int32(len(hashes))
			running++
		}
	}
	clock, lives := x.now(), x.lives()
	now, bucket := uint64(clock.UnixMilli()), uint64(clock.UnixNano()/int64(readQueuedEvery))
	tagHash := fnv1a(sc.tag)
	for b := 0; b < len(hashes) && running > 0; b++ {
		var val []byte
		switch sp := sc.vals[b]; sp.n {
		case spanNil:
		case spanType, spanNotBulk: // the group's MGET failed in the server: its blocks are held by none
			x.metrics.refused.WithLabelValues("type").Inc()
		case spanSize:
			x.metrics.refused.WithLabelValues("size").Inc()
		case spanHolders:
			x.metrics.refused.WithLabelValues("holders").Inc()
			// Folded, it may read again: a key whose compactions the
			// queue dropped while appends grew it.
			x.compactLater(sc.tag, tagHash, hashes[b], bucket)
		default:
			val = sc.arena[sp.off : sp.off+sp.n]
		}
		bad, stores := 0, 0
		for off := 0; off+recordSize <= len(val); off += recordSize {
			hdr := binary.LittleEndian.Uint64(val[off:])
			kind, delta := uint8(hdr>>32), int8(hdr>>40)
			if kind == kindSummary && hdr>>40 == 0 {
				end := off + recordSize*(1+int(uint32(hdr)))
				if end > len(val) || !x.summary(sc, val[off+recordSize:end], binary.LittleEndian.Uint64(val[off+8:])) {
					bad++
					break // the rest cannot be told from the summary's body
				}
				off = end - recordSize
				continue
			}
			if !knownRecord(kind, delta, hdr>>48 == 0) {
				bad++
				continue
			}
			if kind == uint8(kvindex.TierGPU) && delta == 1 {
				stores++ // a compaction folds it into a summary, or drops it
			}
			c := sc.candOf(uint32(hdr))
			if c < 0 {
				continue // no candidate, or one whose run has ended
			}
			v := binary.LittleEndian.Uint64(val[off+8:])
			if kind == kindSpec {
				sc.touch(c)
				sc.spec[c].apply(delta == specSettle, v, sc.epoch[c], lives)
				continue
			}
			if v != sc.epoch[c] {
				continue // from before the pod's current epoch: it counts for nothing
			}
			if kind == uint8(kvindex.TierGPU) && delta == 1 && sc.hold(c) {
				continue // the first record naming c, a store: held, as a summary's member is
			}
			sc.touch(c)
			t := &sc.count[c][kind]
			*t = max(0, *t+int32(delta))
			if kind == uint8(kvindex.TierGPU) && delta > 0 {
				sc.spec[c] = specState{} // confirmed
			}
		}
		if bad > 0 {
			x.metrics.refused.WithLabelValues("record").Add(float64(bad))
		}
		if stores >= compactRead || len(val) >= compactLong {
			x.compactLater(sc.tag, tagHash, hashes[b], bucket)
		}
		for w, a := range sc.alive {
			touched := sc.touched[w] & a
			ends := a &^ (sc.held[w] | touched)
			sc.held[w], sc.touched[w] = 0, 0
			for ; touched != 0; touched &= touched - 1 {
				c := int32(w<<6 + bits.TrailingZeros64(touched))
				switch t := sc.tier(c, now); t {
				case kindNone:
					ends |= touched & -touched
				case uint8(kvindex.TierGPU):
				default:
					sc.tally[c][t]++
				}
			}
			sc.alive[w] = a &^ ends
			for ; ends != 0; ends &= ends - 1 {
				c := int32(w<<6 + bits.TrailingZeros64(ends))
				sc.runs[c] = int32(b)
				sc.unmap(c)
				running--
			}
		}
		sc.anyTouched = false
	}
	for k := range n {
		o, t := &out[sc.cand[k]], &sc.tally[k]
		o.Blocks = int(sc.runs[k])
		gpu := o.Blocks
		for tier := range kvindex.NumTiers {
			if kvindex.Tier(tier) != kvindex.TierGPU {
				o.Tiers[tier] = int(t[tier])
				gpu -= o.Tiers[tier]
			}
		}
		o.Speculative = int(t[kindSpec])
		o.Tiers[kvindex.TierGPU] = gpu - o.Speculative
	}
}

// tier is the fastest tier whose holder the block's folded records of
// candidate c count (kindSpec: a speculative one; kindNone: none), and
// clears them for the next block.
func (sc *matchScratch) tier(c int32, now uint64) uint8 {
	t := uint8(kindNone)
	for tier := range kvindex.NumTiers {
		if sc.count[c][tier] > 0 {
			t = uint8(tier)
			break
		}
	}
	if t == kindNone && sc.spec[c].deadline() > now {
		t = kindSpec
	}
	sc.count[c], sc.spec[c] = [kvindex.NumTiers]int32{}, specState{}
	return t
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
