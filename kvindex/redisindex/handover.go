package redisindex

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// A lease taken over continues the pod (takeScript): the records of its
// previous holders keep counting, and the new holder appends what its own
// view says they lack. It knows the pod's blocks from its local view,
// which holds every event since it began following the pod, but not the
// blocks stored before: those Redis keeps as the previous holders wrote
// them. What the previous holder may not have written is the events since
// its last write: the new holder reads the keys of every block its view
// holds and of every block it saw removed since then, and appends, per
// tier, the difference between its count and Redis's.

// removals are a pod's recent removals as this replica applied them, the
// last maxRemovals, with when each was applied.
type removals struct {
	ring []removal
	next int
	// dropped is when the newest removal the ring has overwritten was
	// applied (unix ns); 0: none.
	dropped int64
}

type removal struct {
	h    uint64
	tier kvindex.Tier
	at   int64 // unix ns
}

// maxRemovals bounds a pod's removals kept: a few seconds of a busy pod's
// evictions, 96 KiB at most.
const maxRemovals = 4096

func (r *removals) add(tier kvindex.Tier, hashes []uint64, at int64) {
	for _, h := range hashes {
		if len(r.ring) < maxRemovals {
			r.ring = append(r.ring, removal{h, tier, at})
			continue
		}
		r.dropped = max(r.dropped, r.ring[r.next].at)
		r.ring[r.next] = removal{h, tier, at}
		r.next = (r.next + 1) % maxRemovals
	}
}

// since returns the removals applied at or after t, and whether the ring
// still has every one of them.
func (r *removals) since(t int64) ([]removal, bool) {
	var out []removal
	for _, x := range r.ring {
		if x.at >= t {
			out = append(out, x)
		}
	}
	return out, r.dropped == 0 || r.dropped < t
}

// unwritten is when the pod's events may have stopped reaching Redis, as
// far as this replica knows: LeaseTTL + LeaseTTL/3 before the last lease
// tick that found another replica holding the pod, or that renewed this
// replica's lease (0: never; every event since this replica began
// following the pod may be missing).
func (x *Index) unwritten(ps *podState) int64 {
	t := ps.written.Load()
	if t == 0 {
		return 0
	}
	return t - int64(x.cfg.LeaseTTL+x.cfg.LeaseTTL/3)
}

// continueLocked makes the pod's records in Redis agree with the local
// view, after a continuing take (e, the entry it wrote): for every block
// the view holds or saw removed since the pod's events may have stopped
// reaching Redis, the pod's count per tier in Redis is read and the
// difference appended under the new epoch. It reports false, having
// written nothing, when the removals since then are no longer all known:
// the caller then starts the pod afresh.
func (x *Index) continueLocked(ps *podState, e podEntry) (bool, error) {
	removed, complete := ps.mu.removed.since(x.unwritten(ps))
	if !complete {
		return false, nil
	}
	want := map[uint64]*[kvindex.NumTiers]int{}
	var order []uint64
	at := func(h uint64) *[kvindex.NumTiers]int {
		c := want[h]
		if c == nil {
			c = new([kvindex.NumTiers]int)
			want[h] = c
			order = append(order, h)
		}
		return c
	}
	if err := x.local.Entries(ps.id, func(h uint64, tier kvindex.Tier, count int) {
		at(h)[tier] = count
	}); err != nil {
		return true, nil // the pod was removed meanwhile
	}
	for _, r := range removed {
		at(r.h) // its count in the view, 0 unless stored again
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*x.cfg.Timeout)
	defer cancel()
	var fixes []copyEntry
	var buf []byte
	for len(order) > 0 {
		chunk := order[:min(len(order), copyBatch)]
		order = order[len(chunk):]
		pipe := x.rdb.Pipeline()
		gets := make([]*redis.StringCmd, len(chunk))
		for i, h := range chunk {
			buf = x.blockKey(buf[:0], ps.tag, h)
			gets[i] = pipe.Get(ctx, string(buf))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !replied(err) {
			return false, err
		}
		for i, h := range chunk {
			val, err := gets[i].Bytes()
			if err != nil && !errors.Is(err, redis.Nil) {
				val = nil // a value Redis refused: counted as none
			}
			has := podCounts(val, e)
			for tier, n := range want[h] {
				if d := n - has[tier]; d != 0 {
					fixes = append(fixes, copyEntry{h, kvindex.Tier(tier), d}) // appendEntries bounds d
				}
			}
		}
	}
	x.metrics.continued.Add(float64(len(fixes)))
	return true, x.appendEntries(ctx, ps, fixes)
}

// podCounts folds a block key's value for the pod of entry e, as a match
// counts it: its summaries expanded (expand, as a compaction reads them),
// then its real records from e.base to e.epoch, each tier's count never
// below zero.
func podCounts(val []byte, e podEntry) (counts [kvindex.NumTiers]int) {
	val = expand(val, podTable{epochs: map[uint32]uint64{e.num: e.epoch}, vers: map[uint32]uint64{e.num: e.version}})
	for off := 0; off+recordSize <= len(val); off += recordSize {
		r, ok := decodeRecord(val[off:])
		if !ok || r.kind == kindSpec || r.num != e.num || r.v < e.base || r.v > e.epoch {
			continue
		}
		counts[r.kind] = max(0, counts[r.kind]+int(r.delta))
	}
	return counts
}

// leaseLive says whether the pod's lease, renewed or taken at the last
// lease tick, is surely still this replica's by its own clock: a holder
// paused past it stops writing, so that a replica continuing the pod
// meanwhile is not written over.
func (x *Index) leaseLive(ps *podState, now time.Time) bool {
	return now.UnixNano() < ps.leaseUntil.Load()
}
