package redisindex

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/redis/go-redis/v9"
)

const (
	// compactEvery: a block key is compacted each time appends grow it past
	// a multiple of this many bytes (64 records).
	compactEvery = 64 * recordSize
	// compactQueue bounds the keys waiting for compaction; more are dropped
	// (the next crossing queues them again).
	compactQueue = 1024
	// compactRead: a block key a match reads with at least this many GPU
	// store records (+1) outside a summary is queued for compaction too,
	// and again at most every readQueuedEvery by this replica. Appends
	// compact a key only as it crosses each 64 records: a block 40 pods
	// store once would otherwise stay 40 records (640 bytes) for every
	// match to read, where its summary is 64 (a 16-byte header and a byte
	// per pod, padded). A compaction leaves no such record but those of
	// pods whose epoch is newer than the pod table it read: a compacted key
	// is not queued again until stores lengthen it again.
	compactRead = 16
	// compactLong: a block key a match reads this long or longer (twice
	// what appends compact at), or past the holder bound, is queued for
	// compaction too: the queue dropped its compactions while appends
	// grew it (a burst the compactor fell behind), and a key no append
	// grows any more would stay so.
	compactLong     = 2 * compactEvery
	readQueuedEvery = 10 * time.Second
	readQueuedSlots = 4096
)

// compaction is a block key to rewrite, with its namespace's tag.
type compaction struct{ tag, key string }

func (x *Index) queueCompaction(tag, key string) {
	select {
	case x.compact <- compaction{tag, key}:
	default:
		x.metrics.compactions.WithLabelValues("dropped").Inc()
	}
}

// compactLater queues block h's key, which a match read long, for
// compaction, unless this replica queued it for that less than about
// readQueuedEvery ago, by the index's clock: bucket is the match's time
// in readQueuedEvery units, tagHash fnv1a of the namespace's tag. The memory of the keys queued
// is direct-mapped: two long keys in one slot are queued at every match
// until the compactor has folded them (a compaction of a key already
// short costs three commands and changes nothing); two matches reading a
// key at once may both queue it.
func (x *Index) compactLater(tag string, tagHash, h, bucket uint64) {
	k := mix(tagHash ^ h)
	v := k ^ bucket
	slot := &x.readQueued[k%readQueuedSlots]
	if slot.Load() == v {
		return
	}
	slot.Store(v)
	x.queueCompaction(tag, string(x.blockKey(nil, tag, h)))
}

// compactBatch bounds the queued keys one round of the compactor folds:
// two round trips for all of them (their pod tables and values, then the
// scripts), where one at a time took three each and fell behind the keys
// that every decision's speculation grows.
const compactBatch = 64

// compactor rewrites queued block keys until ctx ends.
func (x *Index) compactor(ctx context.Context) {
	batch := make([]compaction, 0, compactBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-x.compact:
			batch = append(batch[:0], c)
		}
	more:
		for len(batch) < compactBatch {
			select {
			case c := <-x.compact:
				batch = append(batch, c)
			default:
				break more
			}
		}
		if !x.up.Load() {
			continue
		}
		// A key queued twice is folded once; each entry counts its outcome.
		slices.SortFunc(batch, func(a, b compaction) int { return strings.Compare(a.key, b.key) })
		keys := slices.CompactFunc(slices.Clone(batch), func(a, b compaction) bool { return a.key == b.key })
		errs := x.compactKeys(ctx, keys)
		failed := false
		for i, k := 0, 0; i < len(batch); i++ {
			if batch[i].key != keys[k].key {
				k++
			}
			err := errs[k]
			switch {
			case err == nil:
				x.metrics.compactions.WithLabelValues("done").Inc()
			case errors.Is(err, errCompactRaced):
				x.metrics.compactions.WithLabelValues("raced").Inc() // the next crossing queues the key again
			case replied(err):
				x.metrics.refused.WithLabelValues("type").Inc()
			case ctx.Err() != nil:
				// Cut off by Run's end, not a failure: Redis marked down
				// would leave the leases unreleased (releaseAll), and the
				// pods unwritten until they expire.
			case !failed:
				x.failed("compact", err)
				failed = true
			}
		}
	}
}

// compactScript replaces the prefix ARGV[1] of a block key's value, which
// the caller read and folded into ARGV[2], keeping the records appended
// since and the key's TTL: 1 done (or the key gone), -1 the value no longer
// starts with ARGV[1] (another compaction, or a writer of a new key after
// the old one expired). It compares and copies bytes; it decodes nothing.
var compactScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return 1 end
local old = ARGV[1]
if #cur < #old or string.sub(cur, 1, #old) ~= old then return -1 end
local new = ARGV[2] .. string.sub(cur, #old + 1)
if #new == 0 then redis.call('DEL', KEYS[1]) return 1 end
redis.call('SET', KEYS[1], new, 'KEEPTTL')
return 1`)

// errCompactRaced: the key changed under a compaction other than by
// appends.
var errCompactRaced = errors.New("redisindex: the block key changed during its compaction")

// compactKey folds a block key's records into one per live holder: real
// holders of their pod's current epoch with a count above zero, the last
// unexpired speculative record of each pod. The records appended while it
// folds are kept after the folded ones (compactScript), so a hot key, one
// appended to by every decision, is compacted however busy it is; folding
// the old records first and the new ones after counts as folding them all.
func (x *Index) compactKey(ctx context.Context, c compaction) error {
	return x.compactKeys(ctx, []compaction{c})[0]
}

// compactKeys is compactKey for each of cs, in two pipelines: the pod
// tables of their namespaces and their values, then the scripts. It
// returns each one's outcome.
func (x *Index) compactKeys(ctx context.Context, cs []compaction) []error {
	ctx, cancel := context.WithTimeout(ctx, 4*x.cfg.Timeout)
	defer cancel()
	errs := make([]error, len(cs))
	pipe := x.rdb.Pipeline()
	tableCmds := map[string]*redis.MapStringStringCmd{}
	for _, c := range cs {
		if tableCmds[c.tag] == nil {
			tableCmds[c.tag] = pipe.HGetAll(ctx, x.podsKey(c.tag))
		}
	}
	gets := make([]*redis.StringCmd, len(cs))
	for i, c := range cs {
		gets[i] = pipe.Get(ctx, c.key)
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own
	tables := make(map[string]podTable, len(tableCmds))
	for tag, cmd := range tableCmds {
		if table, err := cmd.Result(); err == nil {
			tables[tag] = parsePodTable(table)
		}
	}
	now, lives := uint64(x.now().UnixMilli()), x.lives()
	scripts := make([]*redis.Cmd, len(cs))
	vals, outs := make([][]byte, len(cs)), make([][]byte, len(cs))
	pipe = x.rdb.Pipeline()
	for i, c := range cs {
		t, ok := tables[c.tag]
		if !ok {
			errs[i] = tableCmds[c.tag].Err()
			continue
		}
		val, err := gets[i].Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			continue // gone
		case err != nil:
			errs[i] = err
			continue
		case len(val)%recordSize != 0:
			x.metrics.refused.WithLabelValues("size").Inc()
			continue
		}
		vals[i], outs[i] = val, fold(val, t, now, lives)
		scripts[i] = compactScript.EvalSha(ctx, pipe, []string{c.key}, vals[i], outs[i])
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for i, cmd := range scripts {
		if cmd == nil {
			continue
		}
		n, err := cmd.Int()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // not loaded yet: sent whole
			n, err = compactScript.Run(ctx, x.rdb, []string{cs[i].key}, vals[i], outs[i]).Int()
		}
		switch {
		case err != nil:
			errs[i] = err
		case n < 0:
			errs[i] = errCompactRaced
		}
	}
	return errs
}

// parsePodTable reads a namespace's pod table as HGETALL returns it.
func parsePodTable(table map[string]string) podTable {
	t := podTable{epochs: make(map[uint32]uint64, len(table)), bases: make(map[uint32]uint64, len(table)), vers: make(map[uint32]uint64, len(table))}
	for name, v := range table {
		switch name {
		case "#next":
			continue
		case "#ver":
			t.version, _ = parseDecimal(v, 1<<63-1)
			continue
		}
		if e, ok := parsePodEntry(v); ok {
			t.epochs[e.num], t.bases[e.num], t.vers[e.num] = e.epoch, e.base, e.version
		}
	}
	return t
}

// podTable is what a compaction read of a namespace's pod table: each
// numbered pod's epoch, the base its records count from and the version at
// its last clear, and the table's version ("#ver"; 0 when the table has
// none).
type podTable struct {
	epochs, bases, vers map[uint32]uint64
	version             uint64
}

// base is the epoch pod num's records count from: its entry's base, or its
// epoch when the table gave none.
func (t podTable) base(num uint32) uint64 {
	if b, ok := t.bases[num]; ok {
		return b
	}
	return t.epochs[num]
}

// expand returns val with each summary (kindSummary) replaced by its
// members' records, GPU stores of their epoch in t while they have had no
// epoch change since the summary's version; a summary of no known shape
// ends it.
func expand(val []byte, t podTable) []byte {
	out := make([]byte, 0, len(val))
	for off := 0; off+recordSize <= len(val); off += recordSize {
		hdr := binary.LittleEndian.Uint64(val[off:])
		if uint8(hdr>>32) != kindSummary || hdr>>40 != 0 {
			out = append(out, val[off:off+recordSize]...)
			continue
		}
		end := off + recordSize*(1+int(uint32(hdr)))
		v := binary.LittleEndian.Uint64(val[off+8:])
		if end > len(val) || !summaryMembers(val[off+recordSize:end], func(num uint32) {
			if ep, ok := t.epochs[num]; ok && t.vers[num] <= v {
				out = appendRecord(out, num, uint8(kvindex.TierGPU), 1, ep)
			}
		}) {
			break
		}
		off = end - recordSize
	}
	return out
}

// fold is compaction's arithmetic: the live holders of val, one record
// each (a settled speculative holder two: its speculation and its
// settling), real ones first, each kind in first-seen order, those held
// once in the GPU tier as one summary under the table's version (when it
// has one); then, as they were, the records of pods the table was read
// before (a newer epoch, or no number yet), which a new lease holder may
// have written since.
func fold(val []byte, t podTable, now uint64, lives specLives) []byte {
	val = expand(val, t)
	epochs := t.epochs
	type holderKey struct {
		num  uint32
		kind uint8
	}
	counts := map[holderKey]int{}
	spec := map[uint32]*specState{}
	// The pods given a new epoch after the table was read: their
	// speculative records stay as they are too, in order with the new
	// holder's stores that may confirm them.
	newer := map[uint32]bool{}
	for off := 0; off+recordSize <= len(val); off += recordSize {
		if r, ok := decodeRecord(val[off:]); ok && r.kind != kindSpec {
			if ep, ok := epochs[r.num]; ok && r.v > ep {
				newer[r.num] = true
			}
		}
	}
	var order []holderKey
	var raw []byte
	for off := 0; off+recordSize <= len(val); off += recordSize {
		r, ok := decodeRecord(val[off:])
		if !ok {
			continue
		}
		k := holderKey{r.num, r.kind}
		if _, seen := counts[k]; !seen {
			order = append(order, k)
			counts[k] = 0
		}
		ep, ok := epochs[r.num]
		if r.kind == kindSpec {
			if !ok || newer[r.num] { // a pod numbered, or given a new epoch, after the table was read
				raw = append(raw, val[off:off+recordSize]...)
				continue
			}
			if spec[r.num] == nil {
				spec[r.num] = &specState{}
			}
			spec[r.num].apply(r.delta == specSettle, r.v, ep, lives)
			continue
		}
		switch {
		case !ok || r.v > ep:
			// A pod numbered, or given a new epoch, after the table was
			// read: its records are a new holder's, kept as they are.
			raw = append(raw, val[off:off+recordSize]...)
			continue
		case r.v < t.base(r.num):
			continue // from before the pod's last clear: counts for nothing
		}
		counts[k] = max(0, counts[k]+int(r.delta))
		if s := spec[r.num]; s != nil && r.kind == uint8(kvindex.TierGPU) && r.delta > 0 {
			*s = specState{} // confirmed
		}
	}
	// The real holders first, then the speculative ones: a pod's GPU
	// record after its speculation would confirm it.
	var out, specs []byte
	var summary []uint32
	for _, k := range order {
		switch {
		case k.kind == kindSpec:
			if s := spec[k.num]; s != nil && s.deadline() > now {
				specs = appendRecord(specs, k.num, kindSpec, 0, s.pending)
				if s.settled != 0 {
					specs = appendRecord(specs, k.num, kindSpec, specSettle, s.settled)
				}
			}
		case counts[k] == 1 && k.kind == uint8(kvindex.TierGPU) && t.version > 0:
			summary = append(summary, k.num)
		case counts[k] > 0:
			out = appendRecord(out, k.num, k.kind, int8(min(counts[k], 127)), epochs[k.num])
		}
	}
	if len(summary) > 0 {
		slices.Sort(summary)
		out = append(summaryOf(t.version, summary), out...)
	}
	out = append(out, specs...)
	return append(out, raw...)
}
