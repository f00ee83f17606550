package redisindex

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
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
	base       []uint64 // by eligible candidate: the epoch its real records count from
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
	// hybrid: a candidate has KV-cache groups besides full attention (in
	// the local view); spots are then the blocks count tallied off the
	// GPU, for kvindex.Index.PriceGroups.
	hybrid bool
	spots  []kvindex.Spot
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
func (x *Index) MatchLoad(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch, peers []replica.PodLoad) ([]kvindex.PodMatch, []replica.PodLoad) {
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
		x.rt.trace(opMatch, start, time.Now(), err)
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out), peers
	}
	sc.hybrid, sc.spots = !x.cfg.NoLocalView && x.local.HasGroups(candidates), sc.spots[:0]
	if x.readTable(sc) {
		x.count(sc, hashes, out)
		if sc.hybrid {
			x.local.PriceGroups(namespace, hashes, out, sc.spots)
		}
	}
	if sc.withLoad {
		x.readLoad(sc, peers)
	}
	end := time.Now()
	x.metrics.rtMatch.Observe(end.Sub(start).Seconds())
	x.rt.trace(opMatch, start, end, nil)
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

// readTable maps the candidates' pod numbers to them and notes their
// epochs. It reports false when the table cannot be read: nothing counts.
func (x *Index) readTable(sc *matchScratch) bool {
	n := len(sc.names)
	sc.epoch = resize(sc.epoch, n)
	sc.base = resize(sc.base, n)
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
		var e podEntry
		ok := sp.n >= 0
		if ok {
			e, ok = parsePodEntry(sc.arena[sp.off : sp.off+sp.n])
		}
		if !ok {
			x.metrics.refused.WithLabelValues("pods").Inc()
			continue
		}
		num, ver := e.num, e.version
		sc.epoch[i], sc.base[i], sc.ver[i], sc.live[i], sc.numOf[i] = e.epoch, e.base, ver, true, num
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

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
