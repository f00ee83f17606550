package redisindex

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// podEntryMax bounds a pod table value read: longer ones are refused.
const podEntryMax = 64

// readRaw reads the candidates' pod table entries and the blocks' values
// in one round trip on a connection of the raw pool.
func (x *Index) readRaw(sc *matchScratch, tag string, hashes []uint64) error {
	c, err := x.raw.get()
	if err != nil {
		return err
	}
	w := appendArray(c.w[:0], 2+len(sc.names))
	w = appendBulk(w, "HMGET")
	w = appendBulk(w, x.podsKey(tag))
	for _, name := range sc.names {
		w = appendBulk(w, name)
	}
	if sc.withLoad {
		w = appendArray(w, 2)
		w = appendBulk(w, "HGETALL")
		w = appendBulk(w, x.loadKey(tag))
	}
	for _, mem := range sc.members {
		if len(mem) == 0 {
			continue
		}
		w = appendArray(w, 1+len(mem))
		w = appendBulk(w, "MGET")
		for _, b := range mem {
			sc.buf = x.blockKey(sc.buf[:0], tag, hashes[b])
			w = appendBulk(w, sc.buf)
		}
	}
	c.w = w
	if err := c.flush(x.cfg.Timeout); err != nil {
		x.raw.put(c, true)
		return err
	}
	err = x.readRawReplies(c, sc)
	x.raw.put(c, err != nil)
	return err
}

func (x *Index) readRawReplies(c *rawConn, sc *matchScratch) error {
	var re replyError
	n, err := c.readArray()
	switch {
	case errors.As(err, &re):
		sc.tableErr = true
	case err != nil:
		return err
	case n != len(sc.names):
		return errProto
	}
	for i := 0; i < n; i++ {
		if sc.arena, sc.tab[i], err = c.readBulk(sc.arena, podEntryMax, 1); err != nil {
			return err
		}
	}
	if sc.withLoad {
		n, err := c.readArray()
		switch {
		case errors.As(err, &re):
			sc.loadErr = true
		case err != nil:
			return err
		case n%2 != 0:
			return errProto
		}
		for i := 0; i < n; i++ {
			var sp span
			if sc.arena, sp, err = c.readBulk(sc.arena, loadFieldMax, 1); err != nil {
				return err
			}
			sc.loadSpans = append(sc.loadSpans, sp)
		}
	}
	maxLen := x.cfg.MaxHolders * recordSize
	for _, mem := range sc.members {
		if len(mem) == 0 {
			continue
		}
		n, err := c.readArray()
		switch {
		case errors.As(err, &re):
			for _, b := range mem {
				sc.vals[b] = span{n: spanType}
			}
			continue
		case err != nil:
			return err
		case n != len(mem):
			return errProto
		}
		for _, b := range mem {
			if sc.arena, sc.vals[b], err = c.readBulk(sc.arena, maxLen, recordSize); err != nil {
				return err
			}
		}
	}
	return nil
}

// readPipe reads what readRaw reads through go-redis, in one pipeline
// (the cluster client sends one per node, in parallel).
func (x *Index) readPipe(sc *matchScratch, tag string, hashes []uint64) error {
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	table := pipe.HMGet(ctx, x.podsKey(tag), sc.names...)
	var load *redis.MapStringStringCmd
	if sc.withLoad {
		load = pipe.HGetAll(ctx, x.loadKey(tag))
	}
	sc.cmds = sc.cmds[:0]
	for _, mem := range sc.members {
		if len(mem) == 0 {
			sc.cmds = append(sc.cmds, nil)
			continue
		}
		sc.keys = sc.keys[:0]
		for _, b := range mem {
			sc.buf = x.blockKey(sc.buf[:0], tag, hashes[b])
			sc.keys = append(sc.keys, string(sc.buf))
		}
		sc.cmds = append(sc.cmds, pipe.MGet(ctx, sc.keys...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		return err
	}
	if table.Err() != nil {
		sc.tableErr = true
	} else {
		for i, v := range table.Val() {
			sc.tab[i] = x.toArena(sc, v, podEntryMax, 1)
		}
	}
	if load != nil {
		if load.Err() != nil {
			sc.loadErr = true
		}
		for f, v := range load.Val() {
			sc.loadSpans = append(sc.loadSpans, x.toArena(sc, f, loadFieldMax, 1), x.toArena(sc, v, loadFieldMax, 1))
		}
	}
	maxLen := x.cfg.MaxHolders * recordSize
	for g, mem := range sc.members {
		if len(mem) == 0 {
			continue
		}
		vals := sc.cmds[g].Val()
		for j, b := range mem {
			if sc.cmds[g].Err() != nil || len(vals) != len(mem) {
				sc.vals[b] = span{n: spanType}
				continue
			}
			sc.vals[b] = x.toArena(sc, vals[j], maxLen, recordSize)
		}
	}
	return nil
}

// toArena copies one go-redis reply value into the arena, as readBulk
// reads it.
func (x *Index) toArena(sc *matchScratch, v any, limit, mod int) span {
	s, ok := v.(string)
	switch {
	case v == nil:
		return span{n: spanNil}
	case !ok:
		return span{n: spanNotBulk}
	case len(s)%mod != 0:
		return span{n: spanSize}
	case len(s) > limit:
		return span{n: spanHolders}
	}
	off := len(sc.arena)
	sc.arena = append(sc.arena, s...)
	return span{off: int32(off), n: int32(len(s))}
}
