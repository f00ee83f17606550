package redisindex

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/replica"
)

// readHomeStream appends to hs.tails the other replicas' tails of the
// namespace ns (tag tag) that cmd read, and, with withHomes, to homes, of
// each prefix, the latest home it read, unless this replica wrote it or
// its pod is not one of byName; it returns homes. A full sync, which
// takes the homes from the table, passes over the stream's.
func (x *Index) readHomeStream(hs *homeShare, tag, ns string, cmd *redis.XMessageSliceCmd, byName map[string]*podState, withHomes bool, homes []replica.Home, now time.Time) []replica.Home {
	msgs, err := cmd.Result()
	if err != nil {
		x.metrics.refused.WithLabelValues("homes").Inc() // a key of the wrong type
		return homes
	}
	type latest struct {
		home replica.Home
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
		var h replica.Home
		if ok {
			h = replica.Home{Namespace: ns, Block: block, Pod: ps.id, Tokens: tokens, Until: until * int64(time.Millisecond)}
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

// readHomeTables appends to homes, in a fixed order, the homes of the
// tables a full sync read (readHomeTable), keeps the other replicas'
// requests in flight in hs.peers, and deletes the fields past their until;
// it returns homes.
func (x *Index) readHomeTables(hs *homeShare, tables map[string]*redis.MapStringStringCmd, f homeFleet, homes []replica.Home, now time.Time) []replica.Home {
	peers := map[string]int64{}
	lapsed := map[string][]string{}
	for tag, cmd := range tables {
		homes = x.readHomeTable(tag, f.namespaces[tag], cmd, f.byName, homes, peers, lapsed, now)
	}
	// In a fixed order: a new prefix enters the router's table as it
	// comes, and which one its bound drops first should not depend on
	// a map's order.
	slices.SortFunc(homes, func(a, b replica.Home) int {
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
	return homes
}

// readHomeTable appends to homes the fields of the namespace ns's table
// (tag tag) that cmd read naming a pod of byName, adds the other
// replicas' requests in flight to peers[ns], and the fields past their
// until to lapsed[tag]; it returns homes.
func (x *Index) readHomeTable(tag, ns string, cmd *redis.MapStringStringCmd, byName map[string]*podState, homes []replica.Home, peers map[string]int64, lapsed map[string][]string, now time.Time) []replica.Home {
	fields, err := cmd.Result()
	if err != nil {
		x.metrics.refused.WithLabelValues("homes").Inc() // a key of the wrong type
		return homes
	}
	nowMs := now.UnixMilli()
	for field, v := range fields {
		if from, ok := strings.CutPrefix(field, "@"); ok {
			var parts [2]uint64
			switch n, ok := parseFields(v, parts[:], 1<<53); {
			case !ok || n != 2:
				x.metrics.refused.WithLabelValues("homes").Inc()
			case int64(parts[1]) <= nowMs:
				lapsed[tag] = append(lapsed[tag], field)
			case from != x.cfg.Replica:
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
			homes = append(homes, replica.Home{Namespace: ns, Block: block, Pod: ps.id, Tokens: tokens, Until: until * int64(time.Millisecond)})
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
func parseTail(str func(string) string) (s replica.HomeTail, ok bool) {
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
	s = replica.HomeTail{Block: block, Blocks: n, BlockSize: bs, Signature: make([]uint64, len(b)/8)}
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
