package redisindex

import (
	"errors"
	"strconv"

	"github.com/kvrouter/kvrouter/kvindex"
)

// takeScript gives a pod a new epoch in its namespace's pod table, and a
// number if it has none. The epoch is the larger of the old one plus one
// and the caller's clock in ms, so that a pod table lost and rebuilt never
// repeats a (number, epoch) pair. It returns {number, epoch, base,
// version}.
//
// A clear (ARGV[4] = 0) starts the pod afresh: its base becomes the new
// epoch, so its older records count for nothing, and the table's version
// ("#ver", raised the same way) is raised and recorded in the pod's entry:
// a compacted key's summary counts a member only while its entry's
// version is at most the one the compaction read (kindSummary). A
// continuing take (ARGV[4] = 1) keeps the pod's base and version: the
// previous holders' records keep counting, and the new holder appends
// under its own epoch.
//
// The epoch is the lease's fencing token. A holder clearing its pod passes
// the epoch it writes under (ARGV[3]); if the table has another, a new
// holder took the pod meanwhile, and the script returns {-1, epoch, 0, 0}
// and changes nothing: a writer that lost its lease without knowing it yet
// cannot clear what the new holder keeps. A replica taking the lease
// passes 0.
const takeScript = `
local v = redis.call('HGET', KEYS[1], ARGV[1])
local num, ep, ver, base
if v then
  num, ep, ver, base = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  if not num then num, ep, ver = string.match(v, '^(%d+):(%d+):(%d+)$') end
  if not num then num, ep = string.match(v, '^(%d+):(%d+)$') end
end
if ARGV[3] ~= '0' and ep ~= ARGV[3] then return {-1, tonumber(ep) or 0, 0, 0} end
local continued = ARGV[4] == '1' and num ~= nil
if not num then
  num = redis.call('HINCRBY', KEYS[1], '#next', 1)
  ep = 0
end
local old = ep
ep = string.format('%d', math.max(tonumber(ep) + 1, tonumber(ARGV[2])))
if continued then
  base = base or old
  ver = ver or '0'
else
  base = ep
  ver = string.format('%d', math.max((tonumber(redis.call('HGET', KEYS[1], '#ver')) or 0) + 1, tonumber(ARGV[2])))
  redis.call('HSET', KEYS[1], '#ver', ver)
end
local entry = num .. ':' .. ep .. ':' .. ver
if base ~= ep then entry = entry .. ':' .. base end
redis.call('HSET', KEYS[1], ARGV[1], entry)
return {tonumber(num), tonumber(ep), tonumber(base), tonumber(ver)}`

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
	switch _, err := x.newEpochLocked(ps, ps.mu.epoch, false); {
	case errors.Is(err, errFenced):
		ps.held.Store(false) // the lease tick takes it again if it is free
		x.metrics.fenced.Inc()
		x.log.Warn("redisindex: another replica took the pod's lease; its events are no longer written here", "pod", ps.name)
	case err != nil:
		x.failed("clear", err)
	}
	return nil
}

// CacheCleared notes that the pod's own cache was cleared (kvevents calls
// it after ClearPod for an AllBlocksCleared event or a publisher restart):
// this replica's view of the pod is then as complete as any writer's, and
// a take of its lease starts the pod afresh with it.
func (x *Index) CacheCleared(pod kvindex.PodID) {
	if ps := x.pod(pod); ps != nil {
		ps.mu.Lock()
		ps.mu.sawClear = true
		ps.mu.Unlock()
	}
}

// errFenced: the pod has a newer epoch than the one its writer passed.
var errFenced = errors.New("redisindex: another replica took the pod's lease")

// newEpochLocked gives the pod a new epoch (and a number if it has none).
// A clear (!continued) starts it afresh: its older records no longer
// count. A continuing take keeps them, when the pod has an entry. fence is
// the epoch the caller writes under, 0 when it takes the lease; errFenced:
// the pod has another. It returns the entry written.
func (x *Index) newEpochLocked(ps *podState, fence uint64, continued bool) (podEntry, error) {
	ctx, cancel := x.ctx()
	defer cancel()
	flag := "0"
	if continued {
		flag = "1"
	}
	res, err := x.rdb.Eval(ctx, takeScript, []string{x.podsKey(ps.tag)}, ps.name, x.now().UnixMilli(), strconv.FormatUint(fence, 10), flag).Int64Slice()
	if err != nil {
		return podEntry{}, err
	}
	if len(res) == 4 && res[0] == -1 {
		return podEntry{}, errFenced
	}
	if len(res) != 4 || res[0] <= 0 || res[0] > 1<<32-1 || res[1] <= 0 || res[2] <= 0 || res[2] > res[1] || res[3] < 0 {
		return podEntry{}, errPodTable
	}
	e := podEntry{num: uint32(res[0]), epoch: uint64(res[1]), base: uint64(res[2]), version: uint64(res[3])}
	ps.mu.num, ps.mu.epoch = e.num, e.epoch
	ps.num.Store(ps.mu.num)
	if e.base == e.epoch {
		x.metrics.clears.Inc()
	}
	return e, nil
}
