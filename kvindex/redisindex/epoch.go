package redisindex

import (
	"errors"
	"strconv"

	"github.com/kvrouter/kvrouter/kvindex"
)

// takeScript gives a pod a new epoch in its namespace's pod table, and a
// number if it has none: the lease holder's clear. The epoch is the larger
// of the old one plus one and the caller's clock in ms, so that a pod table
// lost and rebuilt never repeats a (number, epoch) pair. The table's
// version ("#ver", raised the same way) is raised too and recorded in the
// pod's entry: a compacted key's summary counts a member only while its
// entry's version is at most the one the compaction read (kindSummary).
// It returns {number, epoch}.
//
// The epoch is the lease's fencing token. A holder clearing its pod passes
// the epoch it writes under (ARGV[3]); if the table has another, a new
// holder took the pod meanwhile, and the script returns {-1, epoch} and
// changes nothing: a writer that lost its lease without knowing it yet
// cannot make the new holder's records stale (its own, of its old epoch,
// already do not count). A replica taking the lease passes 0.
const takeScript = `
local v = redis.call('HGET', KEYS[1], ARGV[1])
local num, ep
if v then
  num, ep = string.match(v, '^(%d+):(%d+)$')
  if not num then num, ep = string.match(v, '^(%d+):(%d+):%d+$') end
end
if ARGV[3] ~= '0' and ep ~= ARGV[3] then return {-1, tonumber(ep) or 0} end
if not num then
  num = redis.call('HINCRBY', KEYS[1], '#next', 1)
  ep = 0
end
ep = math.max(tonumber(ep) + 1, tonumber(ARGV[2]))
local ver = math.max((tonumber(redis.call('HGET', KEYS[1], '#ver')) or 0) + 1, tonumber(ARGV[2]))
ver = string.format('%d', ver)
redis.call('HSET', KEYS[1], ARGV[1], num .. ':' .. string.format('%d', ep) .. ':' .. ver, '#ver', ver)
return {tonumber(num), ep}`

// ClearPod clears the pod in the local view and, when this replica holds
// its lease, in Redis, by giving the pod a new epoch: one round trip.
func (x *Index) ClearPod(pod kvindex.PodID) error {
	ps := x.pod(pod)
	if ps == nil {
		return x.local.ClearPod(pod)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	clearLocal := x.local.ClearPod
	if x.cfg.NoLocalView {
		clearLocal = func(id kvindex.PodID) error { return x.checkOnly(id, 0, nil) }
	}
	if err := clearLocal(pod); err != nil || !ps.held.Load() {
		return err
	}
	switch err := x.newEpochLocked(ps, ps.mu.epoch); {
	case errors.Is(err, errFenced):
		ps.held.Store(false) // the lease tick takes it again if it is free
		x.metrics.fenced.Inc()
		x.log.Warn("redisindex: another replica took the pod's lease; its events are no longer written here", "pod", ps.name)
	case err != nil:
		x.failed("clear", err)
	}
	return nil
}

// errFenced: the pod has a newer epoch than the one its writer passed.
var errFenced = errors.New("redisindex: another replica took the pod's lease")

// newEpochLocked gives the pod a new epoch (and a number if it has none):
// its older records no longer count. fence is the epoch the caller writes
// under, 0 when it takes the lease; errFenced: the pod has another.
func (x *Index) newEpochLocked(ps *podState, fence uint64) error {
	ctx, cancel := x.ctx()
	defer cancel()
	res, err := x.rdb.Eval(ctx, takeScript, []string{x.podsKey(ps.tag)}, ps.name, x.now().UnixMilli(), strconv.FormatUint(fence, 10)).Int64Slice()
	if err != nil {
		return err
	}
	if len(res) == 2 && res[0] == -1 {
		return errFenced
	}
	if len(res) != 2 || res[0] <= 0 || res[0] > 1<<32-1 || res[1] <= 0 {
		return errPodTable
	}
	ps.mu.num, ps.mu.epoch = uint32(res[0]), uint64(res[1])
	ps.num.Store(ps.mu.num)
	x.metrics.clears.Inc()
	return nil
}
