package redisindex

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// removeScript takes one count off a real holder and deletes it at zero.
// Scripts are sent whole (EVAL, cached by the server): a pipeline never
// meets a server that forgot them.
const removeScript = `
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return n`

// settleScript shortens a speculative holder's deadline, if it has one.
const settleScript = `
local d = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if d and d > tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0`

// Stored records a BlockStored event in the local view and, when this
// replica holds the pod's lease, in Redis: one pipeline.
func (x *Index) Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	return x.write(pod, tier, hashes, true)
}

// Removed records a BlockRemoved event in the local view and, when this
// replica holds the pod's lease, in Redis: one pipeline.
func (x *Index) Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	return x.write(pod, tier, hashes, false)
}

func (x *Index) write(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64, stored bool) error {
	ps := x.pod(pod)
	if ps == nil {
		if stored {
			return x.local.Stored(pod, tier, hashes)
		}
		return x.local.Removed(pod, tier, hashes)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var err error
	if stored {
		err = x.local.Stored(pod, tier, hashes)
	} else {
		err = x.local.Removed(pod, tier, hashes)
	}
	if err != nil || !ps.held.Load() || len(hashes) == 0 {
		return err
	}
	field := holderField(ps.name, tier, ps.mu.epochs[tier])
	start := time.Now()
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	var buf []byte
	for _, h := range hashes {
		buf = x.blockKey(buf[:0], ps.tag, h)
		key := string(buf)
		if stored {
			pipe.HIncrBy(ctx, key, field, 1)
			pipe.PExpire(ctx, key, x.cfg.TTL)
		} else {
			pipe.Eval(ctx, removeScript, []string{key}, field)
		}
	}
	if err := x.exec(pipe); err != nil {
		x.failed("events", err)
		return nil // the local view has the event; a new lease copies it
	}
	x.metrics.roundTrip.WithLabelValues("events").Observe(time.Since(start).Seconds())
	return nil
}

// exec runs pipe. Errors Redis replied (a key of the wrong type) are left
// in their commands; a failed round trip is returned.
func (x *Index) exec(pipe redis.Pipeliner) error {
	ctx, cancel := x.ctx()
	defer cancel()
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		return err
	}
	return nil
}

// ClearPod clears the pod in the local view and, when this replica holds
// its lease, in Redis, by moving the pod to new epochs: one round trip.
func (x *Index) ClearPod(pod kvindex.PodID) error {
	ps := x.pod(pod)
	if ps == nil {
		return x.local.ClearPod(pod)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := x.local.ClearPod(pod); err != nil || !ps.held.Load() {
		return err
	}
	if err := x.bumpEpochsLocked(ps); err != nil {
		x.failed("clear", err)
	}
	return nil
}

// bumpEpochsLocked moves the pod to new epochs in every tier: its older
// holders no longer count.
func (x *Index) bumpEpochsLocked(ps *podState) error {
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	key := x.epochKey(ps.tag)
	var cmds [kvindex.NumTiers]*redis.IntCmd
	for t := range kvindex.NumTiers {
		cmds[t] = pipe.HIncrBy(ctx, key, epochField(ps.name, kvindex.Tier(t)), 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for t, c := range cmds {
		ps.mu.epochs[t] = c.Val()
	}
	x.metrics.clears.Inc()
	return nil
}

// Speculate records a decision's speculative holders in the local view
// and in Redis, where every replica's matches see them: one pipeline.
func (x *Index) Speculate(pod kvindex.PodID, hashes []uint64) error {
	if err := x.local.Speculate(pod, hashes); err != nil {
		return err
	}
	return x.speculate(pod, hashes, x.spec.SpeculativeTTL, false)
}

// Settle shortens a decision's speculative holders to the grace period in
// the local view and in Redis: one pipeline.
func (x *Index) Settle(pod kvindex.PodID, hashes []uint64) error {
	if err := x.local.Settle(pod, hashes); err != nil {
		return err
	}
	return x.speculate(pod, hashes, x.spec.SpeculativeGrace, true)
}

func (x *Index) speculate(pod kvindex.PodID, hashes []uint64, life time.Duration, settle bool) error {
	ps := x.pod(pod)
	if ps == nil || !x.up.Load() || len(hashes) == 0 {
		return nil
	}
	deadline := x.now().Add(life).UnixMilli()
	field := specField(ps.name)
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	var buf []byte
	for _, h := range hashes {
		buf = x.blockKey(buf[:0], ps.tag, h)
		key := string(buf)
		if settle {
			pipe.Eval(ctx, settleScript, []string{key}, field, deadline)
			continue
		}
		pipe.HSet(ctx, key, field, deadline)
		pipe.PExpire(ctx, key, x.cfg.TTL)
	}
	op := "speculate"
	if settle {
		op = "settle"
	}
	if err := x.exec(pipe); err != nil {
		x.failed(op, err)
	}
	return nil
}
