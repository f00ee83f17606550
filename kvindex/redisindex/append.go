package redisindex

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// appendNow writes the appends of batch in one round trip (and a second
// for the TTLs of keys it created, when they were not set in the first).
func (x *Index) appendNow(batch []*appendReq) error {
	x.ttls.Lock()
	defer x.ttls.Unlock()
	g := &x.ttls.scratch
	g.batch = batch
	x.prepareLocked(g)
	fresh, err := x.appendPipe(g)
	if err != nil || len(fresh) == 0 {
		return err
	}
	return x.expireNew(fresh, g.at)
}

// appendPipe writes g's appends, and the TTLs g.set asks for, in one
// round trip: raw on a standalone server, go-redis on a cluster. It
// returns the keys it created without a TTL.
func (x *Index) appendPipe(g *group) ([]string, error) {
	if x.raw != nil {
		return x.appendRaw(g)
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pipe := x.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(g.set))
	keys := make([]string, 0, len(g.set))
	var buf []byte
	i := 0
	for _, r := range g.batch {
		val := string(r.rec)
		for _, h := range r.hashes {
			if g.skip[i] {
				keys, cmds = append(keys, ""), append(cmds, nil)
				i++
				continue
			}
			buf = x.blockKey(buf[:0], r.tag, h)
			key := string(buf)
			keys = append(keys, key)
			cmds = append(cmds, pipe.Append(ctx, key, val))
			if g.set[i] {
				pipe.PExpireAt(ctx, key, g.at)
			}
			i++
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		return nil, err
	}
	var fresh []string
	i = 0
	for _, r := range g.batch {
		for _, h := range r.hashes {
			if cmds[i] == nil {
				i++
				continue
			}
			n, err := cmds[i].Result()
			x.appended(r, h, n, err)
			if err == nil && n == int64(len(r.rec)) && !g.set[i] && x.cfg.TTL != 0 {
				fresh = append(fresh, keys[i])
			}
			i++
		}
	}
	return fresh, nil
}

// appendRaw is appendPipe on a connection of the raw pool.
func (x *Index) appendRaw(g *group) ([]string, error) {
	c := x.sendGroup(nil, g)
	if c == nil {
		return nil, g.err
	}
	fresh, err := x.recvGroup(g)
	if err == nil {
		x.raw.put(c, false)
	}
	return fresh, err
}

// sendGroup writes every APPEND and PEXPIREAT of g at once on c, or on a
// connection of the raw pool when c is nil or broken, and returns the
// connection it used: nil, with g.err set, when it could not.
func (x *Index) sendGroup(c *rawConn, g *group) *rawConn {
	g.c, g.err = nil, nil
	if c != nil && c.broken.Load() {
		x.raw.put(c, true)
		c = nil
	}
	if c == nil {
		if c, g.err = x.raw.get(); g.err != nil {
			return nil
		}
	}
	var key [80]byte
	// PEXPIREAT, not PEXPIRE: Redis propagates a PEXPIRE rewritten into a
	// PEXPIREAT, which costs it an allocation per command.
	atMs := g.at.UnixMilli()
	w := c.w[:0]
	i := 0
	for _, r := range g.batch {
		for _, h := range r.hashes {
			if g.skip[i] {
				i++
				continue
			}
			k := x.blockKey(key[:0], r.tag, h)
			w = appendArray(w, 3)
			w = appendBulk(w, "APPEND")
			w = appendBulk(w, k)
			w = appendBulk(w, r.rec)
			if g.set[i] {
				w = appendArray(w, 3)
				w = appendBulk(w, "PEXPIREAT")
				w = appendBulk(w, k)
				w = appendBulkInt(w, atMs)
			}
			i++
		}
	}
	c.w = w
	if g.err = c.flush(x.cfg.Timeout); g.err != nil {
		c.broken.Store(true)
		x.raw.put(c, true)
		return nil
	}
	g.c = c
	return c
}

// recvGroup reads the replies of g, sent on g.c, and returns the keys its
// appends created without a TTL. A failed read breaks the connection (its
// stream may be mid-reply), and the groups sent after g on it fail too.
func (x *Index) recvGroup(g *group) ([]string, error) {
	if g.c == nil {
		return nil, g.err
	}
	c := g.c
	fail := func(err error) ([]string, error) {
		if c.broken.CompareAndSwap(false, true) {
			_ = c.c.Close()
		}
		return nil, err
	}
	if c.broken.Load() {
		return fail(errBroken)
	}
	var re replyError
	var fresh []string
	i := 0
	for _, r := range g.batch {
		for _, h := range r.hashes {
			if g.skip[i] {
				i++
				continue
			}
			n, err := c.readInt()
			if err != nil && !errors.As(err, &re) {
				return fail(err)
			}
			x.appended(r, h, n, err)
			if g.set[i] {
				if _, err := c.readInt(); err != nil && !errors.As(err, &re) {
					return fail(err)
				}
			} else if err == nil && n == int64(len(r.rec)) && x.cfg.TTL != 0 {
				fresh = append(fresh, string(x.blockKey(nil, r.tag, h)))
			}
			i++
		}
	}
	return fresh, nil
}

// errBroken: a group sent on a connection whose earlier replies failed.
var errBroken = errors.New("redisindex: the connection failed before this pipeline's replies")

// expireNew sets the TTL of keys appends created: one more pipeline.
func (x *Index) expireNew(keys []string, at time.Time) error {
	pipe := x.rdb.Pipeline()
	ctx, cancel := x.ctx()
	defer cancel()
	for _, k := range keys {
		pipe.PExpireAt(ctx, k, at)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !replied(err) {
		return err
	}
	return nil
}

// appended takes APPEND's reply for block h of r: the key's new length, or
// the error Redis replied (a key of another type).
func (x *Index) appended(r *appendReq, h uint64, n int64, err error) {
	switch {
	case err != nil:
		x.metrics.refused.WithLabelValues("type").Inc()
	case n >= compactEvery && n%compactEvery < int64(len(r.rec)):
		x.queueCompaction(r.tag, string(x.blockKey(nil, r.tag, h)))
	}
}
