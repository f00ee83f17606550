package redisindex

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// leaseScript renews a lease, or takes it when it is free and ARGV[3] is
// 1: 1 renewed, 2 taken, 3 free (not taken), 0 held by another replica.
const leaseScript = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if v then return 0 end
if ARGV[3] ~= '1' then return 3 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 2`

// releaseScript gives up a lease this replica holds.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// copyBatch is how many entries one pipeline of a lease copy carries.
const copyBatch = 2048

// Run keeps this replica's leases and watches Redis until ctx ends: every
// LeaseTTL/3 it takes or renews the lease of every registered pod; while
// Redis is down it pings it every PingInterval instead; while it is up it
// shares the router's homes every HomeSync (homes.go). Meanwhile it runs
// the group writer, which sends concurrent callers' appends in one
// pipeline, and the compactor. It then releases the leases it holds and
// closes the client. Run may be called once.
func (x *Index) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); x.compactor(ctx) }()
	go func() { defer wg.Done(); x.loadWriter(ctx) }()
	go func() { defer wg.Done(); x.groupWriter(ctx) }()
	x.tick()
	x.checkBound()
	leases := time.NewTicker(x.cfg.LeaseTTL / 3)
	defer leases.Stop()
	ping := time.NewTicker(x.cfg.PingInterval)
	defer ping.Stop()
	homes := time.NewTicker(x.cfg.HomeSync)
	defer homes.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			x.releaseAll()
			return x.close()
		case <-leases.C:
			if x.up.Load() {
				x.tick()
			}
		case <-ping.C:
			if !x.up.Load() {
				x.tick()
			}
		case <-homes.C:
			if x.up.Load() {
				x.syncHomes(false)
			}
		}
	}
}

// checkBound, where block keys have no TTL (Config.TTL 0), reads Redis's
// maxmemory and its policy (on a cluster, every master's), and logs an
// error when they do not bound the index: no maxmemory, or a policy that
// evicts no key without a TTL (noeviction refuses writes past maxmemory;
// volatile-* evict only keys with one). A server that does not answer
// CONFIG GET (a managed one may refuse it) is logged as unchecked. It
// returns whether the bound holds.
func (x *Index) checkBound() bool {
	if x.cfg.TTL != 0 {
		return true
	}
	ctx, cancel := x.ctx()
	defer cancel()
	var mu sync.Mutex
	var unbounded []string // "addr: maxmemory …, policy …"
	check := func(ctx context.Context, c *redis.Client) error {
		conf, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			return err
		}
		policy, maxmemory := conf["maxmemory-policy"], conf["maxmemory"]
		if !strings.HasPrefix(policy, "allkeys-") || maxmemory == "" || maxmemory == "0" {
			mu.Lock()
			unbounded = append(unbounded, c.Options().Addr+": maxmemory "+maxmemory+", maxmemory-policy "+policy)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch rdb := x.rdb.(type) {
	case *redis.ClusterClient:
		err = rdb.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, rdb)
	}
	switch {
	case err != nil:
		x.log.Warn("redisindex: index.redis.ttl is 0 and Redis's maxmemory policy could not be checked; block keys are bounded only by it", "error", err)
	case len(unbounded) > 0:
		x.log.Error("redisindex: index.redis.ttl is 0, so block keys have no TTL, and Redis does not bound them: set maxmemory and maxmemory-policy allkeys-lfu (or allkeys-lru), or give index.redis.ttl a duration",
			"servers", strings.Join(unbounded, "; "))
	}
	bounded := err == nil && len(unbounded) == 0
	x.unbounded.Store(!bounded) // read by the gauge too
	return bounded
}

// Renew takes or renews the leases of the registered pods now, and learns
// the numbers of the others, as Run does every LeaseTTL/3. A caller that
// drives the index without Run (the fleet simulator) calls it.
func (x *Index) Renew() { x.tick() }

// tick checks Redis (marking it up when it answers) and renews the leases.
func (x *Index) tick() {
	if !x.up.Load() {
		c, cancel := x.ctx()
		err := x.rdb.Ping(c).Err()
		cancel()
		if err != nil {
			x.metrics.errors.WithLabelValues("ping").Inc()
			return
		}
		x.up.Store(true)
		x.downSince.Store(0)
		x.metrics.up.Set(1)
		if x.downsUnwarned.Load() > 0 { // a flap: its going down was at DEBUG too
			x.log.Debug("redisindex: Redis reachable again; matching through it")
		} else {
			x.log.Info("redisindex: Redis reachable again; matching through it")
		}
		x.checkBound() // a restarted server may run another configuration
	}
	x.renew()
	x.republish()
	x.syncHomes(true)
}

// renew takes or renews every registered pod's lease in one pipeline,
// takes each pod whose lease this replica newly holds (take), and learns
// the numbers of the others (what its speculation names them by).
func (x *Index) renew() {
	x.pods.RLock()
	pods := make([]*podState, 0, len(x.pods.byID))
	for _, ps := range x.pods.byID {
		pods = append(pods, ps)
	}
	x.pods.RUnlock()
	if len(pods) == 0 {
		return
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	leases := make([]*redis.Cmd, len(pods))
	nums := make([]*redis.StringCmd, len(pods))
	ttl := x.cfg.LeaseTTL.Milliseconds()
	sent := time.Now()
	// A lease renewed or taken now is surely this replica's for LeaseTTL
	// from when the request was sent; a third of it is kept as a margin
	// for the appends in flight (leaseLive).
	until := sent.Add(x.cfg.LeaseTTL * 2 / 3).UnixNano()
	for i, ps := range pods {
		leases[i] = pipe.Eval(ctx, leaseScript, []string{x.leaseKey(ps.name)}, x.cfg.Replica, ttl, x.mayTake(ps))
		nums[i] = pipe.HGet(ctx, x.podsKey(ps.tag), ps.name)
	}
	if err := x.exec(pipe); err != nil {
		x.failed("lease", err)
		return
	}
	held := 0
	for i, ps := range pods {
		v, err := nums[i].Result()
		if err == nil {
			if e, ok := parsePodEntry(v); ok {
				ps.num.Store(e.num)
			}
		}
		lost := errors.Is(err, redis.Nil) // the pod table lost the entry: evicted, or deleted
		r, err := leases[i].Int()
		if err == nil && r == 3 && lost {
			// A pod no writer has numbered, or whose entry is gone: there is
			// nothing in Redis to keep, so this replica takes it at once.
			r, err = x.rdb.Eval(ctx, leaseScript, []string{x.leaseKey(ps.name)}, x.cfg.Replica, ttl, "1").Int()
		}
		switch {
		case err != nil:
			x.metrics.errors.WithLabelValues("lease").Inc()
			ps.held.Store(false)
		case r == 0:
			ps.held.Store(false)
			ps.written.Store(sent.UnixNano()) // another replica writes the pod
		case r == 3:
			ps.held.Store(false) // free, but this replica has not followed the pod long enough to take it
		case r == 2 || !ps.held.Load() || lost:
			// Taken now, or ours but not written (an outage, a paused
			// writer), or its entry not kept (a lost Redis, a pod table an
			// allkeys-* policy evicted while the lease stayed): take.
			if r == 1 && lost && ps.held.Load() {
				x.log.Warn("redisindex: the pod table lost a pod this replica writes (evicted?); numbering it again and copying its view", "pod", ps.name)
			}
			if x.take(ps, until) {
				ps.written.Store(sent.UnixNano())
				held++
			}
		default:
			ps.leaseUntil.Store(until)
			ps.written.Store(sent.UnixNano())
			held++
		}
	}
	x.metrics.leases.Set(float64(held))
}

// take makes this replica the pod's writer. When the pod has an entry and
// this replica has not seen it cleared, it continues the pod (the previous
// holders' records keep counting, and this replica appends what they lack
// by its view: continueLocked); otherwise it starts the pod afresh, a new
// epoch with its local view copied in, which is then as complete as any
// writer's. until is when the lease may lapse (leaseLive). It reports
// whether it succeeded.
func (x *Index) take(ps *podState, until int64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.held.Store(false)
	// The pod's events this replica queued before are written (or dropped,
	// the lease having lapsed) before Redis is read: none lands after the
	// take has counted it.
	_ = x.Flush() // a failure marks Redis down; the take then fails too
	how := "fresh"
	e, err := x.newEpochLocked(ps, 0, !ps.mu.sawClear)
	if err == nil && e.base < e.epoch {
		how = "continued"
		var ok bool
		if ok, err = x.continueLocked(ps, e); err == nil && !ok {
			x.log.Warn("redisindex: too many of the pod's removals since its last write to continue it; starting it afresh", "pod", ps.name)
			how = "fresh"
			_, err = x.newEpochLocked(ps, ps.mu.epoch, false)
		}
	}
	if err == nil && how == "fresh" {
		err = x.copyLocked(ps)
	}
	if err != nil {
		x.failed("lease", err)
		return false
	}
	ps.leaseUntil.Store(until) // before held: an event waiting on ps.mu must find the lease live
	ps.held.Store(true)
	x.metrics.taken.WithLabelValues(how).Inc()
	x.log.Info("redisindex: writing the pod's events", "pod", ps.name, "replica", x.cfg.Replica, "how", how)
	return true
}

// copyEntry is a block's count in one tier, appended as one record.
type copyEntry struct {
	h     uint64
	tier  kvindex.Tier
	count int
}

// copyLocked appends the pod's local entries under its new epoch. The
// entries are collected first: no round trip runs under the local view's
// locks.
func (x *Index) copyLocked(ps *podState) error {
	var entries []copyEntry
	if err := x.local.Entries(ps.id, func(h uint64, tier kvindex.Tier, count int) {
		entries = append(entries, copyEntry{h, tier, count})
	}); err != nil {
		return nil // the pod was removed meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*x.cfg.Timeout)
	defer cancel()
	return x.appendEntries(ctx, ps, entries)
}

// appendEntries appends one record per entry, its count the delta (at
// most 127 either way), under the pod's epoch, copyBatch a pipeline.
func (x *Index) appendEntries(ctx context.Context, ps *podState, entries []copyEntry) error {
	var buf, rec []byte
	at := time.Now().Add(x.cfg.TTL) // Redis's clock, not the injected one; PEXPIREAT: see appendRaw
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), copyBatch)]
		entries = entries[len(chunk):]
		pipe := x.rdb.Pipeline()
		for _, e := range chunk {
			buf = x.blockKey(buf[:0], ps.tag, e.h)
			key := string(buf)
			rec = appendRecord(rec[:0], ps.mu.num, uint8(e.tier), int8(max(-127, min(e.count, 127))), ps.mu.epoch)
			pipe.Append(ctx, key, string(rec))
			if x.cfg.TTL != 0 {
				pipe.PExpireAt(ctx, key, at)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
			return err
		}
	}
	return nil
}

// mayTake is the lease script's ARGV[3] for the pod: 1 once this replica
// has followed the pod's events for LeaseTTL, so that when a writer stops,
// a replica that heard the events since its last write takes the pod
// (within LeaseTTL/3) before one started since; a pod with nothing in
// Redis is taken at once (renew).
func (x *Index) mayTake(ps *podState) string {
	if x.now().Sub(ps.since) >= x.cfg.LeaseTTL {
		return "1"
	}
	return "0"
}

// releaseAll gives up every lease this replica holds, so that another
// replica takes the pods over at once.
func (x *Index) releaseAll() {
	x.pods.RLock()
	defer x.pods.RUnlock()
	for _, ps := range x.pods.byID {
		if ps.held.Load() {
			x.release(ps)
		}
	}
}

func (x *Index) release(ps *podState) {
	ps.held.Store(false)
	if !x.up.Load() {
		return
	}
	ctx, cancel := x.ctx()
	defer cancel()
	if err := releaseScript.Run(ctx, x.rdb, []string{x.leaseKey(ps.name)}, x.cfg.Replica).Err(); err != nil && !replied(err) {
		x.failed("lease", err)
	}
}
