package redisindex

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

const (
	// compactEvery: a block key is compacted each time appends grow it past
	// a multiple of this many bytes (64 records).
	compactEvery = 64 * recordSize
	// compactQueue bounds the keys waiting for compaction; more are dropped
	// (the next crossing queues them again).
	compactQueue = 1024
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

// compactor rewrites queued block keys until ctx ends.
func (x *Index) compactor(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-x.compact:
			if !x.up.Load() {
				continue
			}
			switch err := x.compactKey(ctx, c); {
			case err == nil:
				x.metrics.compactions.WithLabelValues("done").Inc()
			case errors.Is(err, redis.TxFailedErr):
				x.metrics.compactions.WithLabelValues("raced").Inc() // a write won; it queues the key again
			case replied(err):
				x.metrics.refused.WithLabelValues("type").Inc()
			default:
				x.failed("compact", err)
			}
		}
	}
}

// compactKey folds a block key's records into one per live holder: real
// holders of their pod's current epoch with a count above zero, the last
// unexpired speculative record of each pod. It rewrites the key only if
// no write touched it meanwhile (WATCH), keeping its TTL.
func (x *Index) compactKey(ctx context.Context, c compaction) error {
	ctx, cancel := context.WithTimeout(ctx, 4*x.cfg.Timeout)
	defer cancel()
	table, err := x.rdb.HGetAll(ctx, x.podsKey(c.tag)).Result()
	if err != nil {
		return err
	}
	epochs := make(map[uint32]uint64, len(table))
	for name, v := range table {
		if name == "#next" {
			continue
		}
		if num, ep, ok := parsePodEntry(v); ok {
			epochs[num] = ep
		}
	}
	return x.rdb.Watch(ctx, func(tx *redis.Tx) error {
		val, err := tx.Get(ctx, c.key).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(val)%recordSize != 0 {
			x.metrics.refused.WithLabelValues("size").Inc()
			return nil
		}
		out := fold(val, epochs, uint64(x.now().UnixMilli()))
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if len(out) == 0 {
				p.Del(ctx, c.key)
				return nil
			}
			p.SetArgs(ctx, c.key, out, redis.SetArgs{KeepTTL: true})
			return nil
		})
		return err
	}, c.key)
}

// fold is compaction's arithmetic: the live holders of val, one record
// each, in first-seen order.
func fold(val []byte, epochs map[uint32]uint64, now uint64) []byte {
	type holderKey struct {
		num  uint32
		kind uint8
	}
	counts := map[holderKey]int{}
	spec := map[uint32]uint64{}
	var order []holderKey
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
		if r.kind == kindSpec {
			spec[r.num] = r.v
			continue
		}
		if ep, ok := epochs[r.num]; !ok || r.v != ep {
			continue
		}
		counts[k] = max(0, counts[k]+int(r.delta))
	}
	var out []byte
	for _, k := range order {
		switch {
		case k.kind == kindSpec:
			if d := spec[k.num]; d > now {
				out = appendRecord(out, k.num, kindSpec, 0, d)
			}
		case counts[k] > 0:
			out = appendRecord(out, k.num, k.kind, int8(min(counts[k], 127)), epochs[k.num])
		}
	}
	return out
}
