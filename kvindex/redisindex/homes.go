package redisindex

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
)

// Homes shared by the replicas: where each prompt prefix lives (the
// router's homes, router/homes.go), so that the replicas' tables agree.
// Each namespace has a home table, a hash, and a home stream, both in the
// pod table's slot:
//
//	<prefix>{<n>}h   "<first block hash, hex>" → "<tokens>:<until ms>:<pod>"
//	                 "@<replica>" → "<requests in flight>:<until ms>"
//	<prefix>{<n>}s   entries, capped near homeStreamKept:
//	                 a home: r (replica), k (first block, hex), p (pod),
//	                 t (tokens), u (until ms);
//	                 a tail: r, k, n (blocks), b (tokens per block),
//	                 s (signature: 8 bytes per hash, little-endian)
//
// Every Config.HomeSync a replica writes the prefixes its router homed or
// routed home since the last time, to the table and the stream, and the
// prompts that grew their footprints (HomeTable.HomesChanged) to the
// stream; and in the same pipeline reads the stream past the last entry
// it read (from its start the first time, at most homeStreamRead entries
// a sync). It hands the other replicas' tails, and of each prefix its
// latest home unless this replica wrote that one, to its router
// (HomeTable.AdoptHomes): the stream's order is Redis's, so every replica
// ends with the last writer's home. At each lease tick (every LeaseTTL/3)
// the sync also writes the requests the replica has in flight to the
// namespace's pods (HomesInFlight, until twice the lease TTL), and reads
// the whole table instead of the stream's homes: the state a new replica,
// or one that fell behind the stream, starts from, the other replicas'
// requests in flight, and the fields past their until, which it deletes
// (a prefix no replica routed home for the router's HomeIdle; a field another
// replica rewrote between that read and the delete is lost until that
// prefix's next request home rewrites it). A replica that falls behind
// the stream by more than it keeps counts the prompts it missed only
// through the shared footprints. The keys live loadTTL past their last
// write.
//
// The router treats its homes as shared until LeaseTTL after a sync (a
// lease tick's at the latest): while Redis is down that lapses, and homes
// again step aside for the requests other replicas send to the pods.

// HomeTable is a router's homes, as the index shares them
// (router.Router).
type HomeTable interface {
	// HomesChanged appends the prefixes homed or routed home since the
	// last call to dst, and the prompts that grew their footprints to
	// tails.
	HomesChanged(dst []replica.Home, tails []replica.HomeTail) ([]replica.Home, []replica.HomeTail)
	// AdoptHomes takes the other replicas' tails, the shared homes and,
	// by namespace, the other replicas' requests in flight; the sharing
	// lasts until until.
	AdoptHomes(homes []replica.Home, tails []replica.HomeTail, peers map[string]int64, until time.Time)
	// HomesInFlight is the requests this replica has in flight to the
	// pods of namespace.
	HomesInFlight(namespace string) int64
}

// homeShare is the router whose homes the index shares, the syncs'
// buffers, the last entry read of each namespace's stream (by tag), and
// the other replicas' requests in flight as of the last lease tick; mu
// serializes the syncs.
type homeShare struct {
	mu    sync.Mutex
	table HomeTable
	buf   []replica.Home
	tails []replica.HomeTail
	last  map[string]string
	peers map[string]int64
}

// homeStreamKept caps a home stream (approximately, as XADD's MAXLEN ~
// does); homeStreamRead bounds the entries of one stream a sync reads.
const (
	homeStreamKept = 10000
	homeStreamRead = 5000
)

// ShareHomes has the index share t's homes with the other replicas'
// (above). Without it, or with Config.NoSharedHomes, nothing is shared.
// Call it before Run.
func (x *Index) ShareHomes(t HomeTable) {
	if x.cfg.NoSharedHomes {
		return
	}
	x.homes.Store(&homeShare{table: t, last: map[string]string{}})
}

// SyncHomes shares the homes now, as Run does every Config.HomeSync (the
// lease ticks, and Renew, share them with the whole table). A caller that
// drives the index without Run (the fleet simulator) calls it.
func (x *Index) SyncHomes() { x.syncHomes(false) }

// homeTableKey is the key of a namespace's home table.
func (x *Index) homeTableKey(tag string) string {
	return x.cfg.Prefix + "{" + tag + "}h"
}

// homeStreamKey is the key of a namespace's home stream.
func (x *Index) homeStreamKey(tag string) string {
	return x.cfg.Prefix + "{" + tag + "}s"
}

// homeField is a prefix's field in its home table.
func homeField(block uint64) string { return strconv.FormatUint(block, 16) }

// syncHomes writes the router's changed homes and tails and reads the
// other replicas' (above); full, a lease tick's, also shares the requests
// in flight and reads the whole table.
func (x *Index) syncHomes(full bool) {
	hs := x.homes.Load()
	if hs == nil {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.buf, hs.tails = hs.table.HomesChanged(hs.buf[:0], hs.tails[:0])
	f := x.homeFleet()
	if len(f.namespaces) == 0 {
		return
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	written, homesOut, tailsOut := x.writeHomes(ctx, pipe, hs, f)
	streams, tables := x.queueHomeReads(ctx, pipe, hs, f, written, full)
	start := time.Now()
	err := x.exec(pipe)
	x.rt.trace(opHomes, start, time.Now(), err)
	if err != nil {
		x.failed("homes", err)
		return
	}
	x.metrics.rtHomes.Observe(time.Since(start).Seconds())
	x.metrics.homesWritten.Add(float64(homesOut))
	x.metrics.tailsWritten.Add(float64(tailsOut))
	now := x.now()
	hs.tails = hs.tails[:0]
	var homes []replica.Home
	for tag, cmd := range streams {
		homes = x.readHomeStream(hs, tag, f.namespaces[tag], cmd, f.byName, !full, homes, now)
	}
	if full { // the homes from the table, as new as the stream read before it
		homes = x.readHomeTables(hs, tables, f, homes, now)
	}
	hs.table.AdoptHomes(homes, hs.tails, hs.peers, now.Add(x.cfg.LeaseTTL))
}

// homeFleet is a sync's view of the registered pods: by handle, by name,
// and their namespaces by tag.
type homeFleet struct {
	byID       map[kvindex.PodID]*podState
	byName     map[string]*podState
	namespaces map[string]string // by tag
}

// homeFleet snapshots the registered pods for a sync.
func (x *Index) homeFleet() homeFleet {
	x.pods.RLock()
	byID := make(map[kvindex.PodID]*podState, len(x.pods.byID))
	byName := make(map[string]*podState, len(x.pods.byID))
	namespaces := map[string]string{} // by tag
	for id, ps := range x.pods.byID {
		byID[id], byName[ps.name] = ps, ps
		namespaces[ps.tag] = ps.ns
	}
	x.pods.RUnlock()
	return homeFleet{byID: byID, byName: byName, namespaces: namespaces}
}

// writeHomes adds to pipe the writes of the router's changed homes (to
// the table and the stream) and tails (to the stream) on pods of f. It
// returns the tags of the namespaces written and how many homes and tails
// it wrote.
func (x *Index) writeHomes(ctx context.Context, pipe redis.Pipeliner, hs *homeShare, f homeFleet) (written map[string]bool, homesOut, tailsOut int) {
	written = map[string]bool{}
	var value []byte
	for _, h := range hs.buf {
		ps := f.byID[h.Pod]
		if ps == nil {
			continue // left the fleet meanwhile
		}
		homesOut++
		until := h.Until / int64(time.Millisecond)
		value = append(appendFields(value[:0], max(h.Tokens, 0), until), ':')
		value = append(value, ps.name...)
		field := homeField(h.Block)
		pipe.HSet(ctx, x.homeTableKey(ps.tag), field, string(value))
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: x.homeStreamKey(ps.tag), MaxLen: homeStreamKept, Approx: true, Values: []any{
			"r", x.cfg.Replica, "k", field, "p", ps.name, "t", max(h.Tokens, 0), "u", until,
		}})
		written[ps.tag] = true
	}
	var sig []byte
	for _, s := range hs.tails {
		tag := nsTag(s.Namespace)
		if _, ok := f.namespaces[tag]; !ok {
			continue
		}
		tailsOut++
		sig = sig[:0]
		for _, v := range s.Signature {
			sig = binary.LittleEndian.AppendUint64(sig, v)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: x.homeStreamKey(tag), MaxLen: homeStreamKept, Approx: true, Values: []any{
			"r", x.cfg.Replica, "k", homeField(s.Block), "n", s.Blocks, "b", s.BlockSize, "s", string(sig),
		}})
		written[tag] = true
	}
	return written, homesOut, tailsOut
}

// queueHomeReads adds to pipe, for each namespace of f, the read of its
// stream past the last entry read, the TTLs of the keys written and, when
// full, the write of this replica's requests in flight and the read of
// the whole table. It returns the stream and table reads by tag.
func (x *Index) queueHomeReads(ctx context.Context, pipe redis.Pipeliner, hs *homeShare, f homeFleet, written map[string]bool, full bool) (map[string]*redis.XMessageSliceCmd, map[string]*redis.MapStringStringCmd) {
	var value []byte
	at := time.Now().Add(loadTTL(x.cfg.TTL)) // Redis's clock, not the injected one
	tables := make(map[string]*redis.MapStringStringCmd, len(f.namespaces))
	streams := make(map[string]*redis.XMessageSliceCmd, len(f.namespaces))
	inFlightUntil := x.now().Add(2 * x.cfg.LeaseTTL).UnixMilli()
	for tag, ns := range f.namespaces {
		if full {
			value = appendFields(value[:0], hs.table.HomesInFlight(ns), inFlightUntil)
			pipe.HSet(ctx, x.homeTableKey(tag), "@"+x.cfg.Replica, string(value))
			written[tag] = true
		}
		if written[tag] {
			pipe.PExpireAt(ctx, x.homeTableKey(tag), at)
			pipe.PExpireAt(ctx, x.homeStreamKey(tag), at)
		}
		from := "-"
		if last := hs.last[tag]; last != "" {
			from = "(" + last
		}
		streams[tag] = pipe.XRangeN(ctx, x.homeStreamKey(tag), from, "+", homeStreamRead)
		if full {
			tables[tag] = pipe.HGetAll(ctx, x.homeTableKey(tag))
		}
	}
	return streams, tables
}
