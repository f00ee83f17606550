package redisindex

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// takeScript gives a pod a new epoch in its namespace's pod table, and a
// number if it has none: the lease holder's clear. The epoch is the larger
// of the old one plus one and the caller's clock in ms, so that a pod table
// lost and rebuilt never repeats a (number, epoch) pair. The table's
// version ("#ver", raised the same way) is raised too and recorded in the
// pod's entry: a compacted key's summary counts a member only while its
// entry's version is at most the one the compaction read (kindSummary).
// It returns {number, epoch}.
//
// The epoch is the lease's fencing token. A holder clearing its pod passes
// the epoch it writes under (ARGV[3]); if the table has another, a new
// holder took the pod meanwhile, and the script returns {-1, epoch} and
// changes nothing: a writer that lost its lease without knowing it yet
// cannot make the new holder's records stale (its own, of its old epoch,
// already do not count). A replica taking the lease passes 0.
const takeScript = `
local v = redis.call('HGET', KEYS[1], ARGV[1])
local num, ep
if v then
  num, ep = string.match(v, '^(%d+):(%d+)$')
  if not num then num, ep = string.match(v, '^(%d+):(%d+):%d+$') end
end
if ARGV[3] ~= '0' and ep ~= ARGV[3] then return {-1, tonumber(ep) or 0} end
if not num then
  num = redis.call('HINCRBY', KEYS[1], '#next', 1)
  ep = 0
end
ep = math.max(tonumber(ep) + 1, tonumber(ARGV[2]))
local ver = math.max((tonumber(redis.call('HGET', KEYS[1], '#ver')) or 0) + 1, tonumber(ARGV[2]))
ver = string.format('%d', ver)
redis.call('HSET', KEYS[1], ARGV[1], num .. ':' .. string.format('%d', ep) .. ':' .. ver, '#ver', ver)
return {tonumber(num), ep}`

// Stored records a BlockStored event in the local view and, when this
// replica holds the pod's lease, in Redis: one pipeline of appends.
func (x *Index) Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	return x.write(pod, tier, hashes, 1)
}

// Removed records a BlockRemoved event in the local view and, when this
// replica holds the pod's lease, in Redis: one pipeline of appends.
func (x *Index) Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	return x.write(pod, tier, hashes, -1)
}

func (x *Index) write(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64, delta int8) error {
	local := x.local.Stored
	if delta < 0 {
		local = x.local.Removed
	}
	if x.cfg.NoLocalView {
		local = x.checkOnly
	}
	ps := x.pod(pod)
	if ps == nil {
		return local(pod, tier, hashes)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := local(pod, tier, hashes); err != nil || !ps.held.Load() || len(hashes) == 0 {
		return err
	}
	req := &appendReq{
		tag:    ps.tag,
		hashes: hashes,
		rec:    appendRecord(nil, ps.mu.num, uint8(tier), delta, ps.mu.epoch),
		op:     "events",
		queued: time.Now(),
	}
	if !x.queueEvent(req) {
		// A failure marks Redis down: the local view has the event, and
		// the lease, taken again, copies it (finish, as for a queued one).
		x.finish([]*appendReq{req}, x.appendNow([]*appendReq{req}))
	}
	return nil
}

// queueEvent hands an event's appends to the group writer, not waiting
// for Redis to have them: the pod's applier goes on with its next event
// while the writer keeps Redis busy with the others'. A pod's events are
// queued under its mutex and written in the order queued, on one
// connection, so they reach Redis in order; the records of an epoch a
// clear or a new lease holder ended since count for nothing when they
// land. A failed write marks Redis down, and the lease, taken again once
// it is back, copies the local view. When the queue is full the caller
// waits. It reports false when no group writer runs (Run not started, or
// ended once what was queued is written): the caller writes itself.
func (x *Index) queueEvent(req *appendReq) bool {
	if !x.grouping.Load() {
		return false // written now: the caller's hashes need no copy
	}
	req.hashes = slices.Clone(req.hashes) // the caller's, reused once it returns
	return x.enqueue(req)
}

// appendReq is one caller's appends: rec to the key of every block of
// hashes.
type appendReq struct {
	tag    string
	hashes []uint64
	rec    []byte
	// done receives the outcome; nil for a request nobody waits for (an
	// event, speculation), whose failure is op's.
	done chan error
	op   string
	// queued is when an event was handed over, for the events round trip
	// metric; zero for other requests.
	queued time.Time
}

// specQueue bounds the decisions' speculation waiting for the group
// writer; when it is full a decision waits.
const specQueue = 1024

// eventQueue bounds the events (and flushes) waiting for the group
// writer: one group commit of 16-block events and as much again. When it
// is full a pod's applier waits.
const eventQueue = 2 * maxGroupBlocks / 16

// maxGroupBlocks bounds the blocks one pipeline carries (two commands
// each), so that a burst of long prompts' speculation does not hold Redis
// for one long pipeline while matches wait behind it.
const maxGroupBlocks = 4096

// maxGroup bounds the callers' appends one pipeline carries.
const maxGroup = 256

// appendAll appends rec to the key of every block of hashes, refreshing
// their TTL, and returns once Redis has them, and everything queued
// before them. While Run is running, the appends of callers that arrive
// together (the appliers of many pods, the decisions of many requests)
// share one pipeline: a group commit.
func (x *Index) appendAll(tag string, hashes []uint64, rec []byte) error {
	req := &appendReq{tag: tag, hashes: hashes, rec: rec, done: make(chan error, 1)}
	if !x.enqueue(req) {
		return x.appendNow([]*appendReq{req})
	}
	return <-req.done
}

// Flush returns once every event written to the index before it is in
// Redis, or its write failed (and Redis is marked down): events do not
// wait for Redis while Run runs. The error is that of the flush's own
// round trip.
func (x *Index) Flush() error {
	return x.appendAll("", nil, nil)
}

// enqueue hands req to the group writer. It returns false when none runs:
// before Run, or once Run has ended and the writer has written what was
// queued; the caller then writes itself, after what was queued.
func (x *Index) enqueue(req *appendReq) bool {
	if !x.grouping.Load() {
		return false
	}
	x.queue.RLock()
	if x.queue.closed {
		x.queue.RUnlock()
		<-x.stopped
		return false
	}
	x.appends <- req
	x.queue.RUnlock()
	if len(x.appends) >= eventBacklog {
		select {
		case x.backlog <- struct{}{}:
		default:
		}
	}
	return true
}

// inFlight is how many group commits the writer keeps sent and not yet
// answered on its connection to a standalone server: while Redis works
// through one pipeline, the next is gathered and sent, and neither side
// waits on the other's turn. Redis answers one connection's commands in
// order, so the records keep the order the writer took them in. The
// second goes out only while eventBacklog events wait: otherwise the
// writer waits for the first's replies, and the decisions' speculation
// gathered meanwhile is coalesced into one commit (two smaller commits
// write a hot block twice as often, and matches read it longer).
const inFlight = 2

// eventBacklog is the events queued past which a second group commit goes
// out while one is in flight.
const eventBacklog = maxGroup / 2

// group is one pipeline of appends: the callers' requests and, by block,
// whether its TTL is refreshed with its append (set) and whether it is
// left out (skip, coalesce); at is the expiry set. On the writer's
// connection, c is the connection it was sent on and err why sending it
// failed.
type group struct {
	batch     []*appendReq
	set, skip []bool
	at        time.Time
	c         *rawConn
	err       error
}

// groupWriter runs the group commits until ctx ends, and then until what
// was queued before is written. On a standalone server it sends a group
// and gathers the next while a reader goroutine takes the replies of the
// one before (inFlight); on a cluster each group's round trip ends before
// the next is gathered.
func (x *Index) groupWriter(ctx context.Context) {
	free := make(chan *group, inFlight)
	for range inFlight {
		free <- &group{batch: make([]*appendReq, 0, maxGroup)}
	}
	var sent chan *group // nil: one round trip at a time
	read := make(chan struct{})
	returned := make(chan struct{}, 1) // a group's replies were read
	var conn *rawConn
	if x.raw != nil {
		sent = make(chan *group, inFlight)
		go func() {
			defer close(read)
			for g := range sent {
				fresh, err := x.recvGroup(g)
				if err == nil && len(fresh) > 0 {
					err = x.expireNew(fresh, g.at)
				}
				x.finish(g.batch, err)
				free <- g
				select {
				case returned <- struct{}{}:
				default:
				}
			}
		}()
	} else {
		close(read)
	}
	commit := func(g *group) {
		if sent == nil {
			x.finish(g.batch, x.appendNow(g.batch))
			free <- g
			return
		}
		x.prepare(g)
		conn = x.sendGroup(conn, g)
		sent <- g
	}
	x.grouping.Store(true)
	for ctx.Err() == nil {
		// A second commit in flight only under a backlog of events.
		for len(free) < inFlight && len(x.appends) < eventBacklog && ctx.Err() == nil {
			select {
			case <-returned:
			case <-x.backlog:
			case <-ctx.Done():
			}
		}
		g := <-free
		if !x.gather(ctx.Done(), g, true) {
			free <- g
			break
		}
		commit(g)
	}
	// Run ended: no more events are queued once the callers queueing now
	// are done (enqueue), and what is queued is written. Speculation still
	// queued is dropped, unless an event's takes it along.
	closed := make(chan struct{})
	go func() {
		x.queue.Lock()
		x.queue.closed = true
		x.queue.Unlock()
		close(closed)
	}()
	for {
		g := <-free
		if !x.gather(closed, g, false) {
			break
		}
		commit(g)
	}
	if sent != nil {
		close(sent)
	}
	<-read // every group sent is answered, and its callers told
	if conn != nil {
		x.raw.put(conn, conn.broken.Load())
	}
	x.grouping.Store(false)
	close(x.stopped)
}

// gather fills g's batch with the appends waiting, at least one; when
// none is, it waits for one (and for speculation too if spec), or returns
// false once stop is closed. An event's records go after the speculation
// queued before them: a decision's speculation made before the pod's
// store of the block is confirmed by it, as in the local view (one made
// after it but taken first is confirmed too: a speculative entry lost,
// never one kept too long).
func (x *Index) gather(stop <-chan struct{}, g *group, spec bool) bool {
	g.batch = g.batch[:0]
	blocks := 0
	add := func(r *appendReq, event bool) {
	drain:
		for event && len(g.batch) < maxGroup {
			select {
			case s := <-x.specQueue:
				g.batch = append(g.batch, s)
				blocks += len(s.hashes)
			default:
				break drain
			}
		}
		g.batch = append(g.batch, r)
		blocks += len(r.hashes)
	}
	specs := x.specQueue
	if !spec {
		specs = nil
	}
	// next adds a request waiting: false when none is.
	next := func() bool {
		select {
		case r := <-x.appends:
			add(r, true)
		case r := <-specs:
			add(r, false)
		default:
			return false
		}
		return true
	}
	if !next() {
		select {
		case <-stop:
			return false
		case r := <-x.appends:
			add(r, true)
		case r := <-specs:
			add(r, false)
		}
	}
	for len(g.batch) < maxGroup && blocks < maxGroupBlocks && next() {
	}
	return true
}

// finish tells batch's callers the outcome of their group commit; a
// failure nobody waits for is counted once, as the first such request's.
// An event's time from its queueing to Redis is observed.
func (x *Index) finish(batch []*appendReq, err error) {
	failed := false
	now := time.Now()
	for _, r := range batch {
		switch {
		case r.done != nil:
			r.done <- err
		case err != nil:
			if !failed {
				x.failed(r.op, err)
				failed = true
			}
		case !r.queued.IsZero():
			x.metrics.rtEvents.Observe(now.Sub(r.queued).Seconds())
		}
	}
}

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

// prepare decides, for each block of g, whether its append is left out
// (coalesce) and whether its TTL is refreshed with it: unless this replica
// refreshed it less than TTL/4 ago (ttlCache); a key an append created
// gets its TTL in a second pipeline when it was not refreshed in the
// first. With no TTL (Config.TTL 0) a block is one APPEND.
func (x *Index) prepare(g *group) {
	x.ttls.Lock()
	defer x.ttls.Unlock()
	x.prepareLocked(g)
}

func (x *Index) prepareLocked(g *group) {
	now := time.Now() // Redis's clock, not the injected one
	g.at = now.Add(x.cfg.TTL)
	x.coalesce(g)
	g.set = g.set[:0]
	i := 0
	for _, r := range g.batch {
		tag := fnv1a(r.tag) // keys the TTL cache with each block's hash
		for _, h := range r.hashes {
			g.set = append(g.set, x.cfg.TTL != 0 && !g.skip[i] && x.ttls.refresh(tag^h, now, x.cfg.TTL/4))
			i++
		}
	}
}

// specKey is one pod's speculation on one block.
type specKey struct {
	tag string
	h   uint64
	num uint32
}

// coalesce marks in g.skip the speculative records of its batch that
// change nothing read after the batch (specState): those before a later
// speculation of the same pod on the same block, and all but the shortest
// settling since the last speculation. A burst of decisions speculating
// and settling one prompt on one pod writes each block at most twice per
// batch, not once per decision.
func (x *Index) coalesce(g *group) {
	g.skip = g.skip[:0]
	if x.ttls.last == nil {
		x.ttls.last = make(map[specKey]specWrites)
	}
	clear(x.ttls.last)
	i := int32(0)
	for _, r := range g.batch {
		if len(r.hashes) == 0 { // a flush
			continue
		}
		spec, settle := r.rec[4] == kindSpec, int8(r.rec[5]) == specSettle
		num := binary.LittleEndian.Uint32(r.rec)
		deadline := binary.LittleEndian.Uint64(r.rec[8:])
		for _, h := range r.hashes {
			g.skip = append(g.skip, false)
			if spec && len(g.batch) > 1 {
				k := specKey{r.tag, h, num}
				w, ok := x.ttls.last[k]
				if !ok {
					w = specWrites{spec: -1, settle: -1}
				}
				switch {
				case !settle: // a new speculation: what came before it changes nothing
					for _, j := range []int32{w.spec, w.settle} {
						if j >= 0 {
							g.skip[j] = true
						}
					}
					w = specWrites{spec: i, settle: -1}
				case w.settle < 0:
					w.settle, w.deadline = i, deadline
				case deadline < w.deadline: // the shorter settling counts
					g.skip[w.settle] = true
					w.settle, w.deadline = i, deadline
				default:
					g.skip[i] = true
				}
				x.ttls.last[k] = w
			}
			i++
		}
	}
}

// specWrites is what counts so far in a batch of one pod's speculation on
// one block: the index of its last speculation and of the shortest
// settling since (-1 none), and that settling's deadline.
type specWrites struct {
	spec, settle int32
	deadline     uint64
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

// ttlCache remembers when this replica last refreshed block keys' TTLs,
// direct-mapped (a collision only costs a refresh): the appends to a hot
// key, one every decision's speculation writes, refresh it once per TTL/4,
// not each time.
type ttlCache struct {
	sync.Mutex
	slots []ttlSlot
	last  map[specKey]specWrites // coalesce's scratch
	// scratch is appendNow's group, for the round trips made outside the
	// group writer.
	scratch group
}

type ttlSlot struct {
	key uint64
	at  int64 // unix ms
}

// ttlSlots is the cache's size: 1 MiB.
const ttlSlots = 1 << 16

// refresh reports whether key's TTL is due (not refreshed within every),
// noting that it will be.
func (c *ttlCache) refresh(key uint64, now time.Time, every time.Duration) bool {
	if c.slots == nil {
		c.slots = make([]ttlSlot, ttlSlots)
	}
	key = mix(key)
	s := &c.slots[key%ttlSlots]
	ms := now.UnixMilli()
	if s.key == key && ms-s.at < every.Milliseconds() {
		return false
	}
	s.key, s.at = key, ms
	return true
}

// mix spreads a 64-bit key's bits (the finalizer of MurmurHash3).
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	return k ^ k>>33
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

// checkOnly is the local view's write without a local view: it only
// checks the handle, as the local view would.
func (x *Index) checkOnly(pod kvindex.PodID, tier kvindex.Tier, _ []uint64) error {
	if int(tier) >= kvindex.NumTiers {
		return fmt.Errorf("%w: %d", kvindex.ErrBadTier, tier)
	}
	if x.local.PodName(pod) == "" {
		return fmt.Errorf("%w: %d", kvindex.ErrUnknownPod, pod)
	}
	return nil
}

// ClearPod clears the pod in the local view and, when this replica holds
// its lease, in Redis, by giving the pod a new epoch: one round trip.
func (x *Index) ClearPod(pod kvindex.PodID) error {
	ps := x.pod(pod)
	if ps == nil {
		return x.local.ClearPod(pod)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	clearLocal := x.local.ClearPod
	if x.cfg.NoLocalView {
		clearLocal = func(id kvindex.PodID) error { return x.checkOnly(id, 0, nil) }
	}
	if err := clearLocal(pod); err != nil || !ps.held.Load() {
		return err
	}
	switch err := x.newEpochLocked(ps, ps.mu.epoch); {
	case errors.Is(err, errFenced):
		ps.held.Store(false) // the lease tick takes it again if it is free
		x.metrics.fenced.Inc()
		x.log.Warn("redisindex: another replica took the pod's lease; its events are no longer written here", "pod", ps.name)
	case err != nil:
		x.failed("clear", err)
	}
	return nil
}

// errFenced: the pod has a newer epoch than the one its writer passed.
var errFenced = errors.New("redisindex: another replica took the pod's lease")

// newEpochLocked gives the pod a new epoch (and a number if it has none):
// its older records no longer count. fence is the epoch the caller writes
// under, 0 when it takes the lease; errFenced: the pod has another.
func (x *Index) newEpochLocked(ps *podState, fence uint64) error {
	ctx, cancel := x.ctx()
	defer cancel()
	res, err := x.rdb.Eval(ctx, takeScript, []string{x.podsKey(ps.tag)}, ps.name, x.now().UnixMilli(), strconv.FormatUint(fence, 10)).Int64Slice()
	if err != nil {
		return err
	}
	if len(res) == 2 && res[0] == -1 {
		return errFenced
	}
	if len(res) != 2 || res[0] <= 0 || res[0] > 1<<32-1 || res[1] <= 0 {
		return errPodTable
	}
	ps.mu.num, ps.mu.epoch = uint32(res[0]), uint64(res[1])
	ps.num.Store(ps.mu.num)
	x.metrics.clears.Inc()
	return nil
}

// SpeculativeTTL is the speculative TTL of the kvindex.Config the index
// was made with.
func (x *Index) SpeculativeTTL() time.Duration { return x.spec.SpeculativeTTL }

// SpeculativeGrace is the speculative grace of the kvindex.Config the
// index was made with.
func (x *Index) SpeculativeGrace() time.Duration { return x.spec.SpeculativeGrace }

// Speculate records a decision's speculative holders in the local view
// and in Redis, where every replica's matches see them: one pipeline.
func (x *Index) Speculate(pod kvindex.PodID, hashes []uint64) error {
	if err := x.local.Speculate(pod, hashes); err != nil {
		return err
	}
	return x.speculate(pod, hashes, x.spec.SpeculativeTTL, 0, "speculate")
}

// Settle shortens a decision's speculative holders to the grace period in
// the local view and in Redis: one pipeline.
func (x *Index) Settle(pod kvindex.PodID, hashes []uint64) error {
	if err := x.local.Settle(pod, hashes); err != nil {
		return err
	}
	return x.speculate(pod, hashes, x.spec.SpeculativeGrace, specSettle, "settle")
}

// speculate appends a speculative record (flag: 0, or specSettle) with
// the deadline now + life.
func (x *Index) speculate(pod kvindex.PodID, hashes []uint64, life time.Duration, flag int8, op string) error {
	ps := x.pod(pod)
	if ps == nil || !x.up.Load() || len(hashes) == 0 {
		return nil
	}
	num := ps.num.Load()
	if num == 0 { // no replica has numbered the pod yet
		return nil
	}
	deadline := uint64(x.now().Add(life).UnixMilli())
	rec := appendRecord(nil, num, kindSpec, flag, deadline)
	if x.grouping.Load() {
		// The decision does not wait for its speculation to reach Redis:
		// the group writer takes requests in order, so a Settle still
		// lands after its Speculate. The hashes are the caller's, reused
		// once it returns: copied.
		select {
		case x.specQueue <- &appendReq{tag: ps.tag, hashes: slices.Clone(hashes), rec: rec, op: op}:
			return nil // (queued as Run ends, it is dropped: speculation is a hint)
		case <-x.stopped:
		}
	}
	if err := x.appendAll(ps.tag, hashes, rec); err != nil {
		x.failed(op, err)
	}
	return nil
}
