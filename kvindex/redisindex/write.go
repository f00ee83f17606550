package redisindex

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Stored records a BlockStored event in the local view and, when this
// replica holds the pod's lease, in Redis: one pipeline of appends.
func (x *Index) Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	return x.write(pod, tier, hashes, 1)
}

// Removed records a BlockRemoved event in the local view and, when this
// replica holds the pod's lease, in Redis: one pipeline of appends.
func (x *Index) Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	return x.write(pod, tier, hashes, -1)
}

func (x *Index) write(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64, delta int8) error {
	local := x.local.Stored
	if delta < 0 {
		local = x.local.Removed
	}
	if x.cfg.NoLocalView {
		local = x.checkOnly
	}
	ps := x.pod(pod)
	if ps == nil {
		return local(pod, tier, hashes)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := local(pod, tier, hashes); err != nil || len(hashes) == 0 {
		return err
	}
	now := time.Now()
	if delta < 0 {
		ps.mu.removed.add(tier, hashes, now.UnixNano()) // for a take that continues the pod
	}
	if !ps.held.Load() {
		return nil
	}
	if !x.leaseLive(ps, now) {
		x.lapsed(ps)
		return nil
	}
	req := &appendReq{
		ps:     ps,
		tag:    ps.tag,
		hashes: hashes,
		rec:    appendRecord(nil, ps.mu.num, uint8(tier), delta, ps.mu.epoch),
		op:     "events",
		queued: now,
	}
	if !x.queueEvent(req) {
		// A failure marks Redis down: the local view has the event, and
		// the lease, taken again, copies it (finish, as for a queued one).
		x.finish([]*appendReq{req}, x.appendNow([]*appendReq{req}))
	}
	return nil
}

// queueEvent hands an event's appends to the group writer, not waiting
// for Redis to have them: the pod's applier goes on with its next event
// while the writer keeps Redis busy with the others'. A pod's events are
// queued under its mutex and written in the order queued, on one
// connection, so they reach Redis in order; the records of an epoch a
// clear or a new lease holder ended since count for nothing when they
// land. A failed write marks Redis down, and the lease, taken again once
// it is back, copies the local view. When the queue is full the caller
// waits. It reports false when no group writer runs (Run not started, or
// ended once what was queued is written): the caller writes itself.
func (x *Index) queueEvent(req *appendReq) bool {
	if !x.grouping.Load() {
		return false // written now: the caller's hashes need no copy
	}
	req.hashes = slices.Clone(req.hashes) // the caller's, reused once it returns
	return x.enqueue(req)
}

// checkOnly is the local view's write without a local view: it only
// checks the handle, as the local view would.
func (x *Index) checkOnly(pod kvindex.PodID, tier kvindex.Tier, _ []uint64) error {
	if int(tier) >= kvindex.NumTiers {
		return fmt.Errorf("%w: %d", kvindex.ErrBadTier, tier)
	}
	if x.local.PodName(pod) == "" {
		return fmt.Errorf("%w: %d", kvindex.ErrUnknownPod, pod)
	}
	return nil
}

// lapsed stops writing the pod's events: its lease, not renewed in time
// (this replica paused, or Redis slow), may be another's by now. The next
// lease tick takes it again, continuing the pod, if it is still free or
// this replica's.
func (x *Index) lapsed(ps *podState) {
	if ps.held.Swap(false) {
		x.metrics.lapsed.Inc()
		x.log.Warn("redisindex: the pod's lease was not renewed in time; its events are no longer written here until the next lease tick", "pod", ps.name)
	}
}
