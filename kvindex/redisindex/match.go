package redisindex

import (
	"encoding/binary"
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
	names  []string // the eligible candidates' names
	cand   []int    // their indexes in out
	bynum  []int32  // pod number → eligible candidate + 1, 0 none
	bigNum map[uint32]int32
	epoch  []uint64 // by eligible candidate; 0: not in the pod table
	// epochBytes is epoch as a record's last 8 bytes, compared whole.
	epochBytes []string
	live       []bool
	best       []uint8 // this block: fastest tier held, kindSpec speculative, kindNone none
	count      [][kvindex.NumTiers]int16
	spec       []uint64 // this block: the last speculative deadline
	touch      []int32
	keys       [][]string // by group
	slot       []int32    // by block: its index in its group's keys
	cmds       []*redis.SliceCmd
	buf        []byte
}

const kindNone = 0xff

var scratchPool = sync.Pool{New: func() any { return &matchScratch{bigNum: map[uint32]int32{}} }}

// Match reports, for each candidate in order, how many leading blocks of
// hashes it holds, as kvindex.Index.Match does, from Redis: one pipelined
// round trip (the pod table's entries of the candidates and one MGET per
// slot group). While Redis is down it answers from the local view.
func (x *Index) Match(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch) []kvindex.PodMatch {
	if !x.up.Load() || len(hashes) == 0 {
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out)
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
		return out
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	table := pipe.HMGet(ctx, x.podsKey(tag), sc.names...)
	x.groupKeys(sc, tag, hashes)
	sc.cmds = sc.cmds[:0]
	for _, keys := range sc.keys {
		if len(keys) > 0 {
			sc.cmds = append(sc.cmds, pipe.MGet(ctx, keys...))
		} else {
			sc.cmds = append(sc.cmds, nil)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		x.failed("match", err)
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out)
	}
	if x.readTable(sc, table) {
		x.count(sc, hashes, out)
	}
	x.metrics.roundTrip.WithLabelValues("match").Observe(time.Since(start).Seconds())
	return out
}

// groupKeys spreads the blocks' keys over their slot groups.
func (x *Index) groupKeys(sc *matchScratch, tag string, hashes []uint64) {
	if len(sc.keys) != x.cfg.Groups {
		sc.keys = make([][]string, x.cfg.Groups)
	}
	for g := range sc.keys {
		sc.keys[g] = sc.keys[g][:0]
	}
	sc.slot = resize(sc.slot, len(hashes))
	for i, h := range hashes {
		g := x.group(h)
		sc.buf = x.blockKey(sc.buf[:0], tag, h)
		sc.slot[i] = int32(len(sc.keys[g]))
		sc.keys[g] = append(sc.keys[g], string(sc.buf))
	}
}

// readTable maps the candidates' pod numbers to them and notes their
// epochs. It reports false when the table cannot be read: nothing counts.
func (x *Index) readTable(sc *matchScratch, table *redis.SliceCmd) bool {
	n := len(sc.names)
	sc.epoch = resize(sc.epoch, n)
	sc.epochBytes = resize(sc.epochBytes, n)
	sc.live = resize(sc.live, n)
	clear(sc.bynum)
	clear(sc.bigNum)
	if table.Err() != nil {
		x.metrics.refused.WithLabelValues("pods").Inc()
		return false
	}
	for i, v := range table.Val() {
		sc.epoch[i], sc.live[i] = 0, false
		sc.epochBytes[i] = ""
		s, ok := v.(string)
		if !ok {
			continue // no writer has numbered the pod: it holds nothing
		}
		num, ep, ok := parsePodEntry(s)
		if !ok {
			x.metrics.refused.WithLabelValues("pods").Inc()
			continue
		}
		sc.epoch[i], sc.live[i] = ep, true
		if len(sc.epochBytes[i]) != 8 || binary.LittleEndian.Uint64([]byte(sc.epochBytes[i])) != ep {
			sc.epochBytes[i] = string(binary.LittleEndian.AppendUint64(nil, ep))
		}
		if num < maxDirectNum {
			if int(num) >= len(sc.bynum) {
				sc.bynum = append(sc.bynum, make([]int32, int(num)+1-len(sc.bynum))...)
			}
			sc.bynum[num] = int32(i) + 1
		} else {
			sc.bigNum[num] = int32(i) + 1
		}
	}
	return true
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

// count walks the blocks in order, extending each candidate's run.
func (x *Index) count(sc *matchScratch, hashes []uint64, out []kvindex.PodMatch) {
	n := len(sc.names)
	sc.best = resize(sc.best, n)
	sc.count = resize(sc.count, n)
	sc.spec = resize(sc.spec, n)
	for i := range n {
		sc.count[i], sc.spec[i], sc.best[i] = [kvindex.NumTiers]int16{}, 0, kindNone
	}
	now := uint64(x.now().UnixMilli())
	maxLen := x.cfg.MaxHolders * recordSize
	for b, h := range hashes {
		var val string
		if vals := sc.cmds[x.group(h)].Val(); int(sc.slot[b]) < len(vals) {
			val, _ = vals[sc.slot[b]].(string)
		} else { // the group's MGET failed in the server: its blocks are held by none
			x.metrics.refused.WithLabelValues("type").Inc()
		}
		switch {
		case len(val)%recordSize != 0:
			x.metrics.refused.WithLabelValues("size").Inc()
			val = ""
		case len(val) > maxLen:
			x.metrics.refused.WithLabelValues("holders").Inc()
			val = ""
		}
		x.fold(sc, val)
		advanced := false
		for k := range n {
			t := sc.best[k]
			if t == kindSpec && sc.spec[k] <= now {
				t = kindNone
			}
			sc.best[k], sc.spec[k] = kindNone, 0
			if !sc.live[k] {
				continue
			}
			o := &out[sc.cand[k]]
			switch t {
			case kindNone:
				sc.live[k] = false
				continue
			case kindSpec:
				o.Speculative++
			default:
				o.Tiers[t]++
			}
			o.Blocks++
			advanced = true
		}
		if !advanced {
			return
		}
	}
}

// fold reads one block's records into sc.best: per candidate, the fastest
// tier it holds for real in its current epoch, else kindSpec if it has a
// speculative record (sc.spec its last deadline).
func (x *Index) fold(sc *matchScratch, val string) {
	sc.touch = sc.touch[:0]
	for off := 0; off+recordSize <= len(val); off += recordSize {
		rec := val[off : off+recordSize]
		kind := rec[4]
		if kind > kindSpec || rec[6] != 0 || rec[7] != 0 {
			x.metrics.refused.WithLabelValues("record").Inc()
			continue
		}
		c := sc.candOf(uint32(rec[0]) | uint32(rec[1])<<8 | uint32(rec[2])<<16 | uint32(rec[3])<<24)
		if c < 0 {
			continue
		}
		if sc.count[c] == ([kvindex.NumTiers]int16{}) && sc.spec[c] == 0 {
			sc.touch = append(sc.touch, c)
		}
		if kind == kindSpec {
			sc.spec[c] = uint64(rec[8]) | uint64(rec[9])<<8 | uint64(rec[10])<<16 | uint64(rec[11])<<24 |
				uint64(rec[12])<<32 | uint64(rec[13])<<40 | uint64(rec[14])<<48 | uint64(rec[15])<<56
			continue
		}
		if rec[8:] == sc.epochBytes[c] { // the pod's current epoch
			sc.count[c][kind] = max(0, sc.count[c][kind]+int16(int8(rec[5])))
		}
	}
	for _, c := range sc.touch {
		best := uint8(kindNone)
		for t := range kvindex.NumTiers {
			if sc.count[c][t] > 0 {
				best = uint8(t)
				break
			}
		}
		if best == kindNone && sc.spec[c] != 0 {
			best = kindSpec
		}
		sc.best[c] = best
	}
	// count consumes and resets best and spec; the tallies are reset here.
	for _, c := range sc.touch {
		sc.count[c] = [kvindex.NumTiers]int16{}
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
