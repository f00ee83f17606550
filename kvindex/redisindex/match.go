package redisindex

import (
	"encoding/binary"
	"errors"
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
	names   []string // the eligible candidates' names
	cand    []int    // their indexes in out
	bynum   []int32  // pod number → eligible candidate + 1, 0 none
	nums    []uint32 // the entries of bynum the last readTable set, to reset
	bigNum  map[uint32]int32
	epoch   []uint64 // by eligible candidate; 0: not in the pod table
	ver     []uint64 // by eligible candidate: the pod table's version at its last epoch change
	live    []bool
	numOf   []uint32                  // by eligible candidate: its pod number
	alive   []int32                   // the candidates whose runs still extend, in no order
	count   [][kvindex.NumTiers]int16 // by candidate: this block's real tallies
	spec    []specState               // by candidate: this block's speculative holder
	tally   [][kindSpec + 1]int32     // by candidate: its run's blocks by tier, speculative last
	members [][]int32                 // by group: its blocks' indexes, in MGET order
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
// no epoch change since the version. It reports false for a body of no
// known shape.
func (x *Index) summary(sc *matchScratch, body []byte, v uint64) bool {
	for i, num := 0, uint32(0); ; {
		if i < len(body) && body[i]-1 < 0x7f && uint64(num)+uint64(body[i]) <= 1<<32-1 {
			num += uint32(body[i]) // a delta of one byte: most of them
			i++
		} else {
			var end, ok bool
			if num, i, end, ok = summaryNext(body, i, num); !ok || end {
				return ok
			}
		}
		if c := sc.candOf(num); c >= 0 && sc.ver[c] <= v {
			sc.count[c][kvindex.TierGPU]++
			if sc.spec[c].pending != 0 {
				sc.spec[c] = specState{} // confirmed, as a store is
			}
		}
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
// speculative records, specState) and advances those holding the block, fastest real
// tier first, speculation only where no real holder counts. A candidate
// whose run ends is unmapped from its pod number, so that its records in
// the blocks after cost one lookup; the runs are tallied in the scratch
// and written to out at the end.
func (x *Index) count(sc *matchScratch, hashes []uint64, out []kvindex.PodMatch) {
	n := len(sc.names)
	sc.count = resize(sc.count, n)
	sc.spec = resize(sc.spec, n)
	sc.tally = resize(sc.tally, n)
	clear(sc.count)
	clear(sc.spec)
	clear(sc.tally)
	sc.alive = sc.alive[:0]
	for k := range n {
		if sc.live[k] {
			sc.alive = append(sc.alive, int32(k))
		}
	}
	now, lives := uint64(x.now().UnixMilli()), x.lives()
	for b := range hashes {
		if len(sc.alive) == 0 {
			break
		}
		var val []byte
		switch sp := sc.vals[b]; sp.n {
		case spanNil:
		case spanType, spanNotBulk: // the group's MGET failed in the server: its blocks are held by none
			x.metrics.refused.WithLabelValues("type").Inc()
		case spanSize:
			x.metrics.refused.WithLabelValues("size").Inc()
		case spanHolders:
			x.metrics.refused.WithLabelValues("holders").Inc()
		default:
			val = sc.arena[sp.off : sp.off+sp.n]
		}
		bad := 0
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
			c := sc.candOf(uint32(hdr))
			if c < 0 {
				continue // no candidate, or one whose run has ended
			}
			v := binary.LittleEndian.Uint64(val[off+8:])
			if kind == kindSpec {
				sc.spec[c].apply(delta == specSettle, v, sc.epoch[c], lives)
				continue
			}
			if v == sc.epoch[c] { // the pod's current epoch
				t := &sc.count[c][kind]
				*t = max(0, *t+int16(delta))
				if kind == uint8(kvindex.TierGPU) && delta > 0 {
					sc.spec[c] = specState{} // confirmed
				}
			}
		}
		if bad > 0 {
			x.metrics.refused.WithLabelValues("record").Add(float64(bad))
		}
		kept := sc.alive[:0]
		for _, c := range sc.alive {
			if cnt := &sc.count[c]; cnt[kvindex.TierGPU] > 0 { // most blocks: held on the GPU
				*cnt = [kvindex.NumTiers]int16{}
				if sc.spec[c].pending != 0 {
					sc.spec[c] = specState{}
				}
				sc.tally[c][kvindex.TierGPU]++
				kept = append(kept, c)
				continue
			}
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
			sc.count[c], sc.spec[c] = [kvindex.NumTiers]int16{}, specState{}
			if t == kindNone {
				sc.live[c] = false
				sc.unmap(c)
				continue
			}
			sc.tally[c][t]++
			kept = append(kept, c)
		}
		sc.alive = kept
	}
	for k := range n {
		o, t := &out[sc.cand[k]], &sc.tally[k]
		for tier := range kvindex.NumTiers {
			o.Tiers[tier] = int(t[tier])
			o.Blocks += int(t[tier])
		}
		o.Speculative = int(t[kindSpec])
		o.Blocks += o.Speculative
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
