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

// leaseScript takes or renews a lease: 1 renewed, 2 taken (it was free),
// 0 held by another replica.
const leaseScript = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0`

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
		x.log.Info("redisindex: Redis reachable again; matching through it")
		x.checkBound() // a restarted server may run another configuration
	}
	x.renew()
	x.republish()
	x.syncHomes(true)
}

// renew takes or renews every registered pod's lease in one pipeline,
// copies the view of each pod whose lease this replica newly holds, and
// learns the numbers of the others (what its speculation names them by).
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
	for i, ps := range pods {
		leases[i] = pipe.Eval(ctx, leaseScript, []string{x.leaseKey(ps.name)}, x.cfg.Replica, ttl)
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
			if num, _, _, ok := parsePodEntry(v); ok {
				ps.num.Store(num)
			}
		}
		lost := errors.Is(err, redis.Nil) // the pod table lost the entry: evicted, or deleted
		r, err := leases[i].Int()
		switch {
		case err != nil:
			x.metrics.errors.WithLabelValues("lease").Inc()
			ps.held.Store(false)
		case r == 0:
			ps.held.Store(false)
		case r == 2 || !ps.held.Load() || lost:
			// Taken now, or ours but its entries were not kept (a lost
			// Redis, an outage, a pod table an allkeys-* policy evicted
			// while the lease stayed): clear and copy.
			if r == 1 && lost && ps.held.Load() {
				x.log.Warn("redisindex: the pod table lost a pod this replica writes (evicted?); numbering it again and copying its view", "pod", ps.name)
			}
			if x.take(ps) {
				held++
			}
		default:
			held++
		}
	}
	x.metrics.leases.Set(float64(held))
}

// take makes this replica the pod's writer: a new epoch, then its local
// view copied in. It reports whether it succeeded.
func (x *Index) take(ps *podState) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.held.Store(false)
	if err := x.newEpochLocked(ps, 0); err != nil {
		x.failed("lease", err)
		return false
	}
	if err := x.copyLocked(ps); err != nil {
		x.failed("lease", err)
		return false
	}
	ps.held.Store(true)
	x.metrics.taken.Inc()
	x.log.Info("redisindex: writing the pod's events", "pod", ps.name, "replica", x.cfg.Replica)
	return true
}

// copyLocked appends the pod's local entries under its new epoch. The
// entries are collected first: no round trip runs under the local view's
// locks.
func (x *Index) copyLocked(ps *podState) error {
	type entry struct {
		h     uint64
		tier  kvindex.Tier
		count int
	}
	var entries []entry
	if err := x.local.Entries(ps.id, func(h uint64, tier kvindex.Tier, count int) {
		entries = append(entries, entry{h, tier, count})
	}); err != nil {
		return nil // the pod was removed meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*x.cfg.Timeout)
	defer cancel()
	var buf, rec []byte
	at := time.Now().Add(x.cfg.TTL) // Redis's clock, not the injected one; PEXPIREAT: see appendRaw
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), copyBatch)]
		entries = entries[len(chunk):]
		pipe := x.rdb.Pipeline()
		for _, e := range chunk {
			buf = x.blockKey(buf[:0], ps.tag, e.h)
			key := string(buf)
			rec = appendRecord(rec[:0], ps.mu.num, uint8(e.tier), int8(min(e.count, 127)), ps.mu.epoch)
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
