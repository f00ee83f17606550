package redisindex

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
)

// SpeculativeTTL is the speculative TTL of the kvindex.Config the index
// was made with.
func (x *Index) SpeculativeTTL() time.Duration { return x.spec.SpeculativeTTL }

// SpeculativeGrace is the speculative grace of the kvindex.Config the
// index was made with.
func (x *Index) SpeculativeGrace() time.Duration { return x.spec.SpeculativeGrace }

// Speculate records a decision's speculative holders in the local view
// and in Redis, where every replica's matches see them: one pipeline.
func (x *Index) Speculate(pod kvindex.PodID, hashes []uint64) error {
	if err := x.local.Speculate(pod, hashes); err != nil {
		return err
	}
	return x.speculate(pod, hashes, x.spec.SpeculativeTTL, 0, "speculate")
}

// Settle shortens a decision's speculative holders to the grace period in
// the local view and in Redis: one pipeline.
func (x *Index) Settle(pod kvindex.PodID, hashes []uint64) error {
	if err := x.local.Settle(pod, hashes); err != nil {
		return err
	}
	return x.speculate(pod, hashes, x.spec.SpeculativeGrace, specSettle, "settle")
}

// speculate appends a speculative record (flag: 0, or specSettle) with
// the deadline now + life.
func (x *Index) speculate(pod kvindex.PodID, hashes []uint64, life time.Duration, flag int8, op string) error {
	ps := x.pod(pod)
	if ps == nil || !x.up.Load() || len(hashes) == 0 {
		return nil
	}
	num := ps.num.Load()
	if num == 0 { // no replica has numbered the pod yet
		return nil
	}
	deadline := uint64(x.now().Add(life).UnixMilli())
	rec := appendRecord(nil, num, kindSpec, flag, deadline)
	if x.grouping.Load() {
		// The decision does not wait for its speculation to reach Redis:
		// the group writer takes requests in order, so a Settle still
		// lands after its Speculate. The hashes are the caller's, reused
		// once it returns: copied.
		select {
		case x.specQueue <- &appendReq{tag: ps.tag, hashes: slices.Clone(hashes), rec: rec, op: op}:
			return nil // (queued as Run ends, it is dropped: speculation is a hint)
		case <-x.stopped:
		}
	}
	if err := x.appendAll(ps.tag, hashes, rec); err != nil {
		x.failed(op, err)
	}
	return nil
}

// specKey is one pod's speculation on one block.
type specKey struct {
	tag string
	h   uint64
	num uint32
}

// coalesce marks in g.skip the speculative records of its batch that
// change nothing read after the batch (specState): those before a later
// speculation of the same pod on the same block, and all but the shortest
// settling since the last speculation. A burst of decisions speculating
// and settling one prompt on one pod writes each block at most twice per
// batch, not once per decision.
func (x *Index) coalesce(g *group) {
	g.skip = g.skip[:0]
	if x.ttls.last == nil {
		x.ttls.last = make(map[specKey]specWrites)
	}
	clear(x.ttls.last)
	i := int32(0)
	for _, r := range g.batch {
		if len(r.hashes) == 0 { // a flush
			continue
		}
		spec, settle := r.rec[4] == kindSpec, int8(r.rec[5]) == specSettle
		num := binary.LittleEndian.Uint32(r.rec)
		deadline := binary.LittleEndian.Uint64(r.rec[8:])
		for _, h := range r.hashes {
			g.skip = append(g.skip, false)
			if spec && len(g.batch) > 1 {
				k := specKey{r.tag, h, num}
				w, ok := x.ttls.last[k]
				if !ok {
					w = specWrites{spec: -1, settle: -1}
				}
				switch {
				case !settle: // a new speculation: what came before it changes nothing
					for _, j := range []int32{w.spec, w.settle} {
						if j >= 0 {
							g.skip[j] = true
						}
					}
					w = specWrites{spec: i, settle: -1}
				case w.settle < 0:
					w.settle, w.deadline = i, deadline
				case deadline < w.deadline: // the shorter settling counts
					g.skip[w.settle] = true
					w.settle, w.deadline = i, deadline
				default:
					g.skip[i] = true
				}
				x.ttls.last[k] = w
			}
			i++
		}
	}
}

// specWrites is what counts so far in a batch of one pod's speculation on
// one block: the index of its last speculation and of the shortest
// settling since (-1 none), and that settling's deadline.
type specWrites struct {
	spec, settle int32
	deadline     uint64
}
