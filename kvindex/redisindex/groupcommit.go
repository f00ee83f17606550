package redisindex

import (
	"context"
	"time"
)

// appendReq is one caller's appends: rec to the key of every block of
// hashes.
type appendReq struct {
	// ps is an event's pod; nil for other requests.
	ps     *podState
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
		x.dropLapsed(g)
		if len(g.batch) == 0 {
			free <- g
			return
		}
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
			x.rt.trace(opEvents, r.queued, now, nil)
		}
	}
}

// dropLapsed takes out of g the events of pods whose lease may have lapsed
// while they waited (leaseLive), and stops writing those pods: a replica
// that continued the pod meanwhile has them from its own view.
func (x *Index) dropLapsed(g *group) {
	now := time.Now()
	kept := g.batch[:0]
	for _, r := range g.batch {
		if r.ps != nil && !x.leaseLive(r.ps, now) {
			x.lapsed(r.ps)
			continue
		}
		kept = append(kept, r)
	}
	clear(g.batch[len(kept):])
	g.batch = kept
}
