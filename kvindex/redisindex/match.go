package redisindex

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// matchScratch is one match's working memory, pooled.
type matchScratch struct {
	byName map[string]int // candidate pod name → candidate
	epochs [][kvindex.NumTiers]int64
	live   []bool // the candidate still extends its run
	real   []int8 // per candidate, this block: fastest real tier, -1 none
	spec   []bool // per candidate, this block: a live speculative holder
	keys   []byte // block key scratch
	cmds   []*redis.MapStringStringCmd
}

var scratchPool = sync.Pool{New: func() any { return &matchScratch{byName: map[string]int{}} }}

// Match reports, for each candidate in order, how many leading blocks of
// hashes it holds, as kvindex.Index.Match does, from Redis: one pipelined
// round trip. While Redis is down it answers from the local view.
func (x *Index) Match(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch) []kvindex.PodMatch {
	if !x.up.Load() || len(hashes) == 0 {
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out)
	}
	start := time.Now()
	sc := scratchPool.Get().(*matchScratch)
	defer scratchPool.Put(sc)
	out = out[:0]
	clear(sc.byName)
	tag := nsTag(namespace)
	x.pods.RLock()
	for i, id := range candidates {
		out = append(out, kvindex.PodMatch{Pod: id})
		if ps := x.pods.byID[id]; ps != nil && ps.tag == tag {
			sc.byName[ps.name] = i
		}
	}
	x.pods.RUnlock()
	if len(sc.byName) == 0 {
		return out
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	epochs := pipe.HGetAll(ctx, x.epochKey(tag))
	sc.cmds = sc.cmds[:0]
	for _, h := range hashes {
		sc.keys = x.blockKey(sc.keys[:0], tag, h)
		sc.cmds = append(sc.cmds, pipe.HGetAll(ctx, string(sc.keys)))
	}
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		x.failed("match", err)
		x.metrics.localMatches.Inc()
		return x.local.Match(namespace, hashes, candidates, out)
	}
	x.count(sc, out, epochs)
	x.metrics.roundTrip.WithLabelValues("match").Observe(time.Since(start).Seconds())
	return out
}

// count walks the blocks' replies, extending each candidate's run.
func (x *Index) count(sc *matchScratch, out []kvindex.PodMatch, epochs *redis.MapStringStringCmd) {
	n := len(out)
	sc.epochs = resize(sc.epochs, n)
	sc.live = resize(sc.live, n)
	sc.real = resize(sc.real, n)
	sc.spec = resize(sc.spec, n)
	for i := range n {
		sc.live[i] = false
		sc.epochs[i] = [kvindex.NumTiers]int64{}
	}
	if err := epochs.Err(); err != nil && !errors.Is(err, redis.Nil) {
		x.metrics.refused.WithLabelValues("epochs").Inc()
		return // no epoch can be trusted: nothing counts
	}
	for name, i := range sc.byName {
		sc.live[i] = true
		for t := range kvindex.NumTiers {
			v, ok := epochs.Val()[epochField(name, kvindex.Tier(t))]
			if !ok {
				continue
			}
			e, err := strconv.ParseInt(v, 10, 64)
			if err != nil || e < 0 {
				x.metrics.refused.WithLabelValues("epochs").Inc()
				sc.live[i] = false
				break
			}
			sc.epochs[i][t] = e
		}
	}
	now := x.now().UnixMilli()
	for _, c := range sc.cmds {
		for i := range n {
			sc.real[i], sc.spec[i] = -1, false
		}
		x.holders(sc, c, now)
		advanced := false
		for i := range n {
			if !sc.live[i] {
				continue
			}
			switch {
			case sc.real[i] >= 0:
				out[i].Tiers[sc.real[i]]++
			case sc.spec[i]:
				out[i].Speculative++
			default:
				sc.live[i] = false
				continue
			}
			out[i].Blocks++
			advanced = true
		}
		if !advanced {
			return
		}
	}
}

// holders reads one block's reply into sc.real and sc.spec, refusing what
// does not have the shape this package writes.
func (x *Index) holders(sc *matchScratch, c *redis.MapStringStringCmd, now int64) {
	if err := c.Err(); err != nil {
		x.metrics.refused.WithLabelValues("type").Inc()
		return
	}
	fields := c.Val()
	if len(fields) > x.cfg.MaxHolders {
		x.metrics.refused.WithLabelValues("holders").Inc()
		return
	}
	for f, v := range fields {
		pod, tier, epoch, spec, ok := parseHolder(f)
		if !ok {
			x.metrics.refused.WithLabelValues("field").Inc()
			continue
		}
		i, cand := sc.byName[pod]
		if !cand {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			x.metrics.refused.WithLabelValues("value").Inc()
			continue
		}
		switch {
		case spec:
			if n > now {
				sc.spec[i] = true
			}
		case n > 0 && epoch == sc.epochs[i][tier] && epoch > 0:
			if sc.real[i] < 0 || int8(tier) < sc.real[i] {
				sc.real[i] = int8(tier)
			}
		}
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
