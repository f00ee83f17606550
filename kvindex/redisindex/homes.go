package redisindex

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
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
// (a prefix no replica routed home for routing.home_idle; a field another
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
	HomesChanged(dst []kvindex.Home, tails []kvindex.HomeTail) ([]kvindex.Home, []kvindex.HomeTail)
	// AdoptHomes takes the other replicas' tails, the shared homes and,
	// by namespace, the other replicas' requests in flight; the sharing
	// lasts until until.
	AdoptHomes(homes []kvindex.Home, tails []kvindex.HomeTail, peers map[string]int64, until time.Time)
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
	buf   []kvindex.Home
	tails []kvindex.HomeTail
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
	x.pods.RLock()
	byID := make(map[kvindex.PodID]*podState, len(x.pods.byID))
	byName := make(map[string]*podState, len(x.pods.byID))
	namespaces := map[string]string{} // by tag
	for id, ps := range x.pods.byID {
		byID[id], byName[ps.name] = ps, ps
		namespaces[ps.tag] = ps.ns
	}
	x.pods.RUnlock()
	if len(namespaces) == 0 {
		return
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	written := map[string]bool{}
	var value []byte
	var homesOut, tailsOut int
	for _, h := range hs.buf {
		ps := byID[h.Pod]
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
		if _, ok := namespaces[tag]; !ok {
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
	at := time.Now().Add(loadTTL(x.cfg.TTL)) // Redis's clock, not the injected one
	tables := make(map[string]*redis.MapStringStringCmd, len(namespaces))
	streams := make(map[string]*redis.XMessageSliceCmd, len(namespaces))
	inFlightUntil := x.now().Add(2 * x.cfg.LeaseTTL).UnixMilli()
	for tag, ns := range namespaces {
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
	start := time.Now()
	if err := x.exec(pipe); err != nil {
		x.failed("homes", err)
		return
	}
	x.metrics.rtHomes.Observe(time.Since(start).Seconds())
	x.metrics.homesWritten.Add(float64(homesOut))
	x.metrics.tailsWritten.Add(float64(tailsOut))
	now := x.now()
	hs.tails = hs.tails[:0]
	var homes []kvindex.Home
	for tag, cmd := range streams {
		homes = x.readHomeStream(hs, tag, namespaces[tag], cmd, byName, !full, homes, now)
	}
	if full { // the homes from the table, as new as the stream read before it
		peers := map[string]int64{}
		lapsed := map[string][]string{}
		for tag, cmd := range tables {
			homes = x.readHomeTable(tag, namespaces[tag], cmd, byName, homes, peers, lapsed, now)
		}
		// In a fixed order: a new prefix enters the router's table as it
		// comes, and which one its bound drops first should not depend on
		// a map's order.
		slices.SortFunc(homes, func(a, b kvindex.Home) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Block, b.Block))
		})
		hs.peers = peers
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
	hs.table.AdoptHomes(homes, hs.tails, hs.peers, now.Add(x.cfg.LeaseTTL))
}

// readHomeStream appends to hs.tails the other replicas' tails of the
// namespace ns (tag tag) that cmd read, and, with withHomes, to homes, of
// each prefix, the latest home it read, unless this replica wrote it or
// its pod is not one of byName; it returns homes. A full sync, which
// takes the homes from the table, passes over the stream's.
func (x *Index) readHomeStream(hs *homeShare, tag, ns string, cmd *redis.XMessageSliceCmd, byName map[string]*podState, withHomes bool, homes []kvindex.Home, now time.Time) []kvindex.Home {
	msgs, err := cmd.Result()
	if err != nil {
		x.metrics.refused.WithLabelValues("homes").Inc() // a key of the wrong type
		return homes
	}
	type latest struct {
		home kvindex.Home
		ok   bool // another replica's, on a pod of this one's
	}
	if len(msgs) == homeStreamRead {
		x.metrics.homesBehind.Inc()
	}
	var order []uint64
	last := map[uint64]latest{}
	for _, m := range msgs {
		hs.last[tag] = m.ID
		str := func(k string) string { f, _ := m.Values[k].(string); return f }
		own := str("r") == x.cfg.Replica
		if _, isHome := m.Values["p"]; !isHome {
			if own {
				continue
			}
			if s, ok := parseTail(str); ok {
				s.Namespace = ns
				hs.tails = append(hs.tails, s)
				x.metrics.tailsRead.Inc()
			} else {
				x.metrics.refused.WithLabelValues("homes").Inc()
			}
			continue
		}
		if !withHomes {
			continue
		}
		block, err1 := strconv.ParseUint(str("k"), 16, 64)
		tokens, err2 := strconv.ParseInt(str("t"), 10, 64)
		until, err3 := strconv.ParseInt(str("u"), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || tokens < 0 {
			x.metrics.refused.WithLabelValues("homes").Inc()
			continue
		}
		if _, seen := last[block]; !seen {
			order = append(order, block)
		}
		if !own {
			x.metrics.homesRead.Inc()
		}
		ps := byName[str("p")]
		ok := !own && ps != nil && ps.tag == tag && until > now.UnixMilli()
		var h kvindex.Home
		if ok {
			h = kvindex.Home{Namespace: ns, Block: block, Pod: ps.id, Tokens: tokens, Until: until * int64(time.Millisecond)}
		}
		last[block] = latest{h, ok}
	}
	for _, b := range order {
		if l := last[b]; l.ok {
			homes = append(homes, l.home)
		}
	}
	return homes
}

// readHomeTable appends to homes the fields of the namespace ns's table
// (tag tag) that cmd read naming a pod of byName, adds the other
// replicas' requests in flight to peers[ns], and the fields past their
// until to lapsed[tag]; it returns homes.
func (x *Index) readHomeTable(tag, ns string, cmd *redis.MapStringStringCmd, byName map[string]*podState, homes []kvindex.Home, peers map[string]int64, lapsed map[string][]string, now time.Time) []kvindex.Home {
	fields, err := cmd.Result()
	if err != nil {
		x.metrics.refused.WithLabelValues("homes").Inc() // a key of the wrong type
		return homes
	}
	nowMs := now.UnixMilli()
	for field, v := range fields {
		if replica, ok := strings.CutPrefix(field, "@"); ok {
			var parts [2]uint64
			switch n, ok := parseFields(v, parts[:], 1<<53); {
			case !ok || n != 2:
				x.metrics.refused.WithLabelValues("homes").Inc()
			case int64(parts[1]) <= nowMs:
				lapsed[tag] = append(lapsed[tag], field)
			case replica != x.cfg.Replica:
				peers[ns] += int64(parts[0])
			}
			continue
		}
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
		if ps := byName[pod]; ps != nil && ps.tag == tag {
			homes = append(homes, kvindex.Home{Namespace: ns, Block: block, Pod: ps.id, Tokens: tokens, Until: until * int64(time.Millisecond)})
		}
	}
	return homes
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

// parseTail reads a tail entry of a home stream, whose fields str
// returns, its namespace left to the caller.
func parseTail(str func(string) string) (s kvindex.HomeTail, ok bool) {
	block, err := strconv.ParseUint(str("k"), 16, 64)
	if err != nil {
		return s, false
	}
	n, err1 := strconv.Atoi(str("n"))
	bs, err2 := strconv.Atoi(str("b"))
	sig := str("s")
	if err1 != nil || err2 != nil || n < 1 || n > maxTailBlocks || bs < 1 || bs > 1<<16 || len(sig) == 0 || len(sig)%8 != 0 || len(sig)/8 > n || len(sig) > maxTailSignature {
		return s, false // the router checks the signature's length against n
	}
	b := []byte(sig)
	s = kvindex.HomeTail{Block: block, Blocks: n, BlockSize: bs, Signature: make([]uint64, len(b)/8)}
	for i := range s.Signature {
		s.Signature[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return s, true
}

// maxTailBlocks bounds a tail's prompt (16 Mi tokens in blocks of 16),
// and maxTailSignature its signature's bytes (the router keeps a hash per
// 16 blocks: 8 MiB at most; a longer one is refused).
const (
	maxTailBlocks    = 1 << 20
	maxTailSignature = 8 << 20
)
