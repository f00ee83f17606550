package redisindex

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Homes shared by the replicas: where each prompt prefix lives (the
// router's homes, router/homes.go), so that the replicas' tables agree.
// Each namespace's home table is a hash in the pod table's slot:
//
//	<prefix>{<n>}h   "<first block hash, hex>" → "<tokens>:<until ms>:<pod>"
//
// At each lease tick (every LeaseTTL/3, while Redis is up) a replica
// writes the prefixes its router homed or routed home since the last one
// (HomeTable.HomesChanged), and in the same pipeline reads the tables of
// the namespaces of its pods, its own writes or later ones included. It
// hands the fields naming its pods to its router (HomeTable.AdoptHomes),
// so the last writer of a prefix wins, and deletes the fields past their
// until (a prefix no replica routed home for routing.home_idle). A field
// another replica rewrote between that read and the delete is lost until
// that prefix's next request home rewrites it. The table's key lives
// loadTTL past its last write.
//
// The router treats its homes as shared until LeaseTTL after a tick that
// read them (three ticks): while Redis is down they lapse, and homes step
// aside again for requests the other replicas send to the pods.

// HomeTable is a router's homes, as the index shares them
// (router.Router).
type HomeTable interface {
	// HomesChanged appends the prefixes homed or routed home since the
	// last call to dst.
	HomesChanged(dst []kvindex.Home) []kvindex.Home
	// AdoptHomes takes the shared homes; the sharing lasts until until.
	AdoptHomes(homes []kvindex.Home, until time.Time)
}

// homeShare is the router whose homes the index shares, and the tick's
// buffer; mu serializes the ticks' shares.
type homeShare struct {
	mu    sync.Mutex
	table HomeTable
	buf   []kvindex.Home
}

// ShareHomes has each lease tick share t's homes with the other
// replicas' (above). Without it, or with Config.NoSharedHomes, nothing is
// shared. Call it before Run.
func (x *Index) ShareHomes(t HomeTable) {
	if x.cfg.NoSharedHomes {
		return
	}
	x.homes.Store(&homeShare{table: t})
}

// homeTableKey is the key of a namespace's home table.
func (x *Index) homeTableKey(tag string) string {
	return x.cfg.Prefix + "{" + tag + "}h"
}

// homeField is a prefix's field in its home table.
func homeField(block uint64) string { return strconv.FormatUint(block, 16) }

// syncHomes writes the router's changed homes and reads every replica's
// back (above): the lease tick's.
func (x *Index) syncHomes() {
	hs := x.homes.Load()
	if hs == nil {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.buf = hs.table.HomesChanged(hs.buf[:0])
	x.pods.RLock()
	byID := make(map[kvindex.PodID]*podState, len(x.pods.byID))
	byName := make(map[string]*podState, len(x.pods.byID))
	tags := map[string]bool{}
	for id, ps := range x.pods.byID {
		byID[id], byName[ps.name] = ps, ps
		tags[ps.tag] = true
	}
	x.pods.RUnlock()
	if len(tags) == 0 {
		return
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	written := map[string]bool{}
	var value []byte
	for _, h := range hs.buf {
		ps := byID[h.Pod]
		if ps == nil {
			continue // left the fleet meanwhile
		}
		value = strconv.AppendInt(value[:0], max(h.Tokens, 0), 10)
		value = append(value, ':')
		value = strconv.AppendInt(value, h.Until/int64(time.Millisecond), 10)
		value = append(value, ':')
		value = append(value, ps.name...)
		pipe.HSet(ctx, x.homeTableKey(ps.tag), homeField(h.Block), string(value))
		written[ps.tag] = true
	}
	at := time.Now().Add(loadTTL(x.cfg.TTL)) // Redis's clock, not the injected one
	for tag := range written {
		pipe.PExpireAt(ctx, x.homeTableKey(tag), at)
	}
	reads := make(map[string]*redis.MapStringStringCmd, len(tags))
	for tag := range tags {
		reads[tag] = pipe.HGetAll(ctx, x.homeTableKey(tag))
	}
	start := time.Now()
	if err := x.exec(pipe); err != nil {
		x.failed("homes", err)
		return
	}
	x.metrics.roundTrip.WithLabelValues("homes").Observe(time.Since(start).Seconds())
	now := x.now()
	nowMs := now.UnixMilli()
	var homes []kvindex.Home
	lapsed := map[string][]string{}
	for tag, cmd := range reads {
		fields, err := cmd.Result()
		if err != nil {
			x.metrics.refused.WithLabelValues("homes").Inc() // a key of the wrong type
			continue
		}
		for field, v := range fields {
			block, err := strconv.ParseUint(field, 16, 64)
			tokens, until, pod, ok := parseHome(v)
			if err != nil || !ok {
				x.metrics.refused.WithLabelValues("homes").Inc()
				continue
			}
			if until <= nowMs {
				lapsed[tag] = append(lapsed[tag], field)
				continue
			}
			ps := byName[pod]
			if ps == nil || ps.tag != tag {
				continue // a pod this replica does not follow
			}
			homes = append(homes, kvindex.Home{Namespace: ps.ns, Block: block, Pod: ps.id, Tokens: tokens, Until: until * int64(time.Millisecond)})
		}
	}
	hs.table.AdoptHomes(homes, now.Add(x.cfg.LeaseTTL))
	if len(lapsed) > 0 {
		pipe := x.rdb.Pipeline()
		for tag, fields := range lapsed {
			pipe.HDel(context.Background(), x.homeTableKey(tag), fields...)
		}
		if err := x.exec(pipe); err != nil {
			x.failed("homes", err)
		}
	}
}

// parseHome reads a home table value "<tokens>:<until ms>:<pod>".
func parseHome(v string) (tokens, until int64, pod string, ok bool) {
	if len(v) > loadFieldMax {
		return 0, 0, "", false
	}
	i := strings.IndexByte(v, ':')
	if i < 0 {
		return 0, 0, "", false
	}
	j := strings.IndexByte(v[i+1:], ':')
	if j < 0 {
		return 0, 0, "", false
	}
	j += i + 1
	var parts [2]uint64
	if n, ok := parseFields(v[:j], parts[:], 1<<53); !ok || n != 2 || j == len(v)-1 {
		return 0, 0, "", false
	}
	return int64(parts[0]), int64(parts[1]), v[j+1:], true
}
