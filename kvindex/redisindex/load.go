package redisindex

import (
	"context"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
)

// In-flight prefill shared by the replicas. Each replica counts the
// prefill its decisions routed to each pod and that is not done yet (what
// its fleet.Load holds) and publishes it in its namespace's load table, a
// hash in the pod table's slot:
//
//	<prefix>{<n>}l   "<pod>|<replica>" → "<tokens>:<requests>:<deadline ms>"
//
// A field is rewritten at each change of the replica's count on the pod
// (deleted when it reaches zero), and at each lease tick while it is not
// zero; a field past its deadline (twice the lease TTL, so a dead
// replica's load lapses in that time) counts for nothing. A match reads
// the table in its round trip and reports, by candidate, the sum of the
// other replicas' fields.

// loadKey is the key of a namespace's load table.
func (x *Index) loadKey(tag string) string {
	return x.cfg.Prefix + "{" + tag + "}l"
}

// loadFieldMax bounds a load table field or value read: longer ones are
// refused.
const loadFieldMax = 512

// Charge adds tokens and requests to the prefill this replica routed to
// pod and that is not done yet, and publishes the pod's new count: through
// Run's load writer, which writes what changed in one pipeline without
// holding up the caller, or at once without Run.
func (x *Index) Charge(pod kvindex.PodID, tokens, requests int64) {
	if x.cfg.NoSharedLoad {
		return
	}
	ps := x.pod(pod)
	if ps == nil {
		return
	}
	ps.load.tokens.Add(tokens)
	ps.load.requests.Add(requests)
	if !x.up.Load() {
		return // the lease tick republishes it once Redis is back
	}
	if !x.grouping.Load() {
		x.publish([]*podState{ps})
		return
	}
	ps.load.dirty.Store(true)
	select {
	case x.loadKick <- struct{}{}:
	default:
	}
}

// loadWriter publishes the pods whose count changed until ctx ends.
func (x *Index) loadWriter(ctx context.Context) {
	var dirty []*podState
	for {
		select {
		case <-ctx.Done():
			return
		case <-x.loadKick:
		}
		dirty = dirty[:0]
		x.pods.RLock()
		for _, ps := range x.pods.byID {
			if ps.load.dirty.CompareAndSwap(true, false) {
				dirty = append(dirty, ps)
			}
		}
		x.pods.RUnlock()
		if len(dirty) > 0 && x.up.Load() {
			x.publish(dirty)
		}
	}
}

// republish rewrites the fields of the pods this replica has prefill on,
// renewing their deadlines: the lease tick's.
func (x *Index) republish() {
	if x.cfg.NoSharedLoad {
		return
	}
	var pods []*podState
	x.pods.RLock()
	for _, ps := range x.pods.byID {
		if ps.load.tokens.Load() > 0 || ps.load.requests.Load() > 0 {
			pods = append(pods, ps)
		}
	}
	x.pods.RUnlock()
	if len(pods) > 0 {
		x.publish(pods)
	}
}

// publish writes the pods' counts in one pipeline.
func (x *Index) publish(pods []*podState) {
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	deadline := x.now().Add(2 * x.cfg.LeaseTTL).UnixMilli()
	at := time.Now().Add(loadTTL(x.cfg.TTL)) // Redis's clock, not the injected one
	var buf []byte
	for _, ps := range pods {
		key, field := x.loadKey(ps.tag), ps.name+"|"+x.cfg.Replica
		tokens, requests := ps.load.tokens.Load(), ps.load.requests.Load()
		if tokens <= 0 && requests <= 0 {
			pipe.HDel(ctx, key, field)
			continue
		}
		buf = appendFields(buf[:0], max(tokens, 0), max(requests, 0), deadline)
		pipe.HSet(ctx, key, field, string(buf))
		pipe.PExpireAt(ctx, key, at)
	}
	start := time.Now()
	err := x.exec(pipe)
	x.rt.trace(opLoad, start, time.Now(), err)
	if err != nil {
		x.failed("load", err)
		return
	}
	x.metrics.rtLoad.Observe(time.Since(start).Seconds())
}

// loadTTL is how long a namespace's load table lives after its last write:
// the block keys' TTL, or an hour when they have none. Its fields lapse at
// their own deadlines; this only bounds a table nobody writes any more.
func loadTTL(ttl time.Duration) time.Duration {
	if ttl == 0 {
		return time.Hour
	}
	return ttl
}

// readLoad sums the other replicas' fields of the load table, read into
// sc.loadSpans (field, value, ...), into peers by candidate.
func (x *Index) readLoad(sc *matchScratch, peers []replica.PodLoad) {
	if sc.loadErr {
		x.metrics.refused.WithLabelValues("load").Inc()
		return
	}
	clear(sc.byName)
	for k, name := range sc.names {
		sc.byName[name] = int32(sc.cand[k])
	}
	now := x.now().UnixMilli()
	for i := 0; i+1 < len(sc.loadSpans); i += 2 {
		f, v := sc.loadSpans[i], sc.loadSpans[i+1]
		if f.n < 0 || v.n < 0 {
			x.metrics.refused.WithLabelValues("load").Inc()
			continue
		}
		field := sc.arena[f.off : f.off+f.n]
		bar := -1
		for j, ch := range field {
			if ch == '|' {
				bar = j
				break
			}
		}
		if bar <= 0 {
			x.metrics.refused.WithLabelValues("load").Inc()
			continue
		}
		if string(field[bar+1:]) == x.cfg.Replica {
			continue // this replica's own: its fleet.Load has it, fresher
		}
		tokens, requests, deadline, ok := parseLoad(sc.arena[v.off : v.off+v.n])
		if !ok {
			x.metrics.refused.WithLabelValues("load").Inc()
			continue
		}
		c, found := sc.byName[string(field[:bar])]
		if !found || int64(deadline) <= now {
			continue // not a candidate, or lapsed
		}
		peers[c].PrefillTokens += int64(tokens)
		peers[c].Prefilling += int64(requests)
	}
}

// parseLoad reads a load table value "<tokens>:<requests>:<deadline>".
func parseLoad(b []byte) (tokens, requests, deadline uint64, ok bool) {
	var parts [3]uint64
	if n, ok := parseFields(b, parts[:], 1<<53); !ok || n != 3 {
		return 0, 0, 0, false
	}
	return parts[0], parts[1], parts[2], true
}
