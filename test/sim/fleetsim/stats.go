package fleetsim

import (
	"math"
	"slices"
)

// Stats summarizes the requests of one load level (or of all, pooled).
type Stats struct {
	Level         string
	QPS           float64 // offered, simulated
	Requests      int     // requests that finished
	TimedOut      int     // requests the client canceled: in no other figure, as a benchmark counts failures
	P50, P90, P99 float64 // time to first token (from the send), seconds
	Mean          float64
	WaitP90       float64 // the client's queue wait before the send, seconds
	OutputTPS     float64 // output tokens of the level's requests per second of serving them
	HitRatio      float64 // prompt blocks found cached / full prompt blocks
	BoundRatio    float64 // the same under one pooled LRU of the fleet's capacity
	// ITL is the mean inter-token latency: each request's (last token −
	// first) / (output tokens − 1), averaged over requests of two or more
	// output tokens, seconds.
	ITL float64
	// Hops is the requests whose prompt a prefill pod computed, and
	// Transfer their mean KV transfer time, seconds.
	Hops     int
	Transfer float64
}

// FracOfBound is HitRatio as a fraction of BoundRatio (1 when both are 0).
func (s Stats) FracOfBound() float64 {
	if s.BoundRatio == 0 {
		return 1
	}
	return s.HitRatio / s.BoundRatio
}

// Summarize returns one Stats per level of w and, last, all levels pooled
// (level "all"). bound holds each request's hit blocks under the global
// LRU (see BoundHits).
func Summarize(w *Workload, res *Result, bound []int) []Stats {
	var out []Stats
	all := make([]int, 0, len(w.Requests))
	timedOut := 0
	for li, l := range w.Levels {
		var ids []int
		n := 0
		for i := range w.Requests {
			if w.Requests[i].Level != li {
				continue
			}
			switch o := res.Outcomes[i]; {
			case o.TimedOut:
				n++
			case o.answered():
				ids = append(ids, i)
			}
		}
		all = append(all, ids...)
		timedOut += n
		start := l.Start
		if li < len(res.LevelStarts) {
			start = res.LevelStarts[li]
		}
		st := summarize(res, bound, ids, start)
		st.Level, st.QPS, st.TimedOut = l.Name, l.QPS, n
		out = append(out, st)
	}
	st := summarize(res, bound, all, 0)
	st.Level, st.TimedOut = "all", timedOut
	if n := len(w.Requests); n > 0 {
		st.QPS = float64(n) / (w.Levels[len(w.Levels)-1].End - w.Levels[0].Start)
	}
	return append(out, st)
}

func summarize(res *Result, bound, ids []int, start float64) Stats {
	st := Stats{Requests: len(ids)}
	if len(ids) == 0 {
		return st
	}
	ttft := make([]float64, 0, len(ids))
	wait := make([]float64, 0, len(ids))
	var sum, itl, xfer float64
	var out, hit, blocks, bhit, decoded int
	end := start
	for _, i := range ids {
		o := res.Outcomes[i]
		if o.Output > 1 {
			itl += (o.Finish - o.First) / float64(o.Output-1)
			decoded++
		}
		if o.Hop {
			st.Hops++
			xfer += o.Transfer
		}
		t := o.First - o.Arrival
		ttft = append(ttft, t)
		wait = append(wait, o.Arrival-o.Scheduled)
		sum += t
		out += o.Output
		hit += o.Hit
		blocks += o.Blocks
		bhit += bound[i]
		end = max(end, o.Finish)
	}
	slices.Sort(ttft)
	slices.Sort(wait)
	st.WaitP90 = quantile(wait, 0.9)
	st.P50, st.P90, st.P99 = quantile(ttft, 0.5), quantile(ttft, 0.9), quantile(ttft, 0.99)
	st.Mean = sum / float64(len(ids))
	if end > start {
		st.OutputTPS = float64(out) / (end - start)
	}
	if decoded > 0 {
		st.ITL = itl / float64(decoded)
	}
	if st.Hops > 0 {
		st.Transfer = xfer / float64(st.Hops)
	}
	if blocks > 0 {
		st.HitRatio = float64(hit) / float64(blocks)
		st.BoundRatio = float64(bhit) / float64(blocks)
	}
	return st
}

// LevelTTFTs appends to dst the time to first token of every request of
// level li of w (len(w.Levels): every level) that got its whole answer in
// res, unsorted.
func LevelTTFTs(dst []float64, w *Workload, res *Result, li int) []float64 {
	for i, o := range res.Outcomes {
		if o.answered() && (li == len(w.Levels) || w.Requests[i].Level == li) {
			dst = append(dst, o.First-o.Arrival)
		}
	}
	return dst
}

// Quantile is the q-quantile of xs, nearest rank; it sorts xs.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return quantile(xs, q)
}

// answered says o's request got its whole answer: the statistics' sample.
func (o Outcome) answered() bool { return !o.TimedOut && o.Finish > 0 }

// PooledTTFT is the q-quantile of the time to first token of every
// request that finished in any of rs: runs of one workload under several
// seeds, pooled into one sample.
func PooledTTFT(q float64, rs ...*Result) float64 {
	var ttft []float64
	for _, r := range rs {
		for _, o := range r.Outcomes {
			if o.answered() {
				ttft = append(ttft, o.First-o.Arrival)
			}
		}
	}
	if len(ttft) == 0 {
		return 0
	}
	slices.Sort(ttft)
	return quantile(ttft, q)
}

// quantile is the q-quantile of sorted xs, nearest rank.
func quantile(xs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// BoundHits replays w's prompts in arrival order through one pooled cache
// of blocks blocks (the whole fleet's) with the pods' semantics, one
// request at a time, and returns each request's hit blocks: what a
// perfect router could hope for with that much cache, ignoring
// concurrency and output blocks.
func BoundHits(w *Workload, blocks int) []int {
	c := newCache(blocks)
	hits := make([]int, len(w.Requests))
	var ids []int32
	for i := range w.Requests {
		r := &w.Requests[i]
		hs := r.Hashes[:min(len(r.Hashes), (r.Prompt-1)/w.BlockSize, blocks)]
		h := c.hits(hs)
		hits[i] = h
		ids = c.acquire(ids[:0], hs[:h])
		var ok bool
		if ids, ok = c.allocate(ids, len(hs)-h); ok {
			for k := h; k < len(hs); k++ {
				c.commit(ids[k], hs[k])
			}
		}
		c.release(ids)
		c.events = c.events[:0]
	}
	return hits
}
