package router

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// kvrouter's queue: once a model's queued prompts pass what its pods' KV
// caches hold and the caches lose what routing matched, a pod with
// Config.QueuePrefillsPerPod requests awaiting their first token takes no
// more, and requests wait here for a pod with room, which gets the one it
// caches most of; docs/routing.md#the-queue states the rule and why. Here:
// each model's gate (gate, opens, staysOpen; queueLost in tuning.go), the
// waiting tickets, and one releaser at a time that matches the index
// without the queue's lock (release, releaseOne). A request waits at most
// Config.QueueMaxWait; each replica queues its own requests.

// requestQueue is kvrouter's queue.
type requestQueue struct {
	mu sync.Mutex
	// waiting are the held tickets, oldest first.
	waiting []*Ticket
	// n is len(waiting), read without the lock.
	n atomic.Int64
	// open is how many namespaces' gates are open, read without the lock.
	open atomic.Int64
	// reserved is the tickets released to each pod and not yet routed:
	// they count as its requests awaiting their first token.
	reserved map[kvindex.PodID]int
	// gates is each namespace's gate.
	gates map[string]*queueGate
	// draining is set by Drain: no request is held any more.
	draining atomic.Bool
	// releasing is true while a goroutine releases tickets (release);
	// again asks it to look once more, for a call that came meanwhile.
	releasing, again bool
	// scan and matches are the releasing goroutine's working memory, which
	// it uses with and without the lock.
	scan    []scanEntry
	matches []kvindex.PodMatch
}

// scanEntry is a waiting ticket release matches against the pods with
// room for it, copied under the lock so that the index is matched
// without it.
type scanEntry struct {
	t      *Ticket
	ns     string
	hashes []uint64
	free   []kvindex.PodID
}

// queueGate is one namespace's gate.
type queueGate struct {
	on   bool
	held int64 // prompt tokens of its held tickets
}

// Ticket is a request the router holds. Route waits on it; a caller of
// Begin waits on Ready, then calls Finish (or Cancel).
type Ticket struct {
	r     *Router
	req   Request
	ev    evaluation
	sc    *scratch
	since time.Time     // when it was held
	spent time.Duration // the decision's time before it was held
	ready chan struct{}
	// Under the queue's lock:
	state   ticketState
	pod     kvindex.PodID // the pod it was released to; anyPod: routed as usual
	drained bool          // released by Drain
}

type ticketState uint8

const (
	ticketWaiting ticketState = iota
	ticketReleased
	ticketGone // expired or canceled: no longer in the queue
)

// anyPod marks a ticket routed to whichever pod its decision picks.
const anyPod = kvindex.InvalidPod

// hold returns a ticket for the request whose evaluation is ev, its
// scratch sc (which the ticket then owns), when the router holds it; nil
// when it routes now.
func (r *Router) enqueue(req Request, ev evaluation, sc *scratch, start time.Time) *Ticket {
	if r.cfg.QueuePrefillsPerPod <= 0 || ev.ns == "" || disaggregated(sc.members) || r.queue.draining.Load() {
		return nil
	}
	q := &r.queue
	if q.n.Load() == 0 && q.open.Load() == 0 && !opens(sc.members, 0, int64(ev.tokens)) {
		return nil // every gate is closed and this request opens none: no lock on the request path
	}
	q.mu.Lock()
	if !q.gate(ev.ns, sc.members, int64(ev.tokens)) {
		q.mu.Unlock()
		return nil
	}
	now := r.now()
	t := &Ticket{r: r, req: req, ev: ev, sc: sc, since: now, spent: time.Since(start), ready: make(chan struct{}), pod: anyPod}
	q.waiting = append(q.waiting, t)
	q.n.Add(1)
	q.gates[ev.ns].held += int64(ev.tokens)
	r.metrics.queued.Inc()
	r.metrics.waiting.WithLabelValues(ev.model).Inc()
	q.mu.Unlock()
	r.release()
	return t
}

// Drain stops the queue for good: every request it holds is released, to
// be routed at once as if its wait had expired, and no later request is
// held. kvrouter calls it when it starts to stop (SIGTERM), so that no
// request waits past the servers' shutdown and is lost.
func (r *Router) Drain() {
	q := &r.queue
	q.draining.Store(true)
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.waiting) > 0 {
		q.waiting[0].drained = true
		q.hand(0, anyPod)
	}
}

// gate updates and reports the gate of namespace ns, whose candidates are
// members, with extra prompt tokens about to be held. Called with q.mu.
func (q *requestQueue) gate(ns string, members []*fleet.Member, extra int64) bool {
	g := q.gates[ns]
	if g == nil {
		if q.gates == nil {
			q.gates, q.reserved = map[string]*queueGate{}, map[kvindex.PodID]int{}
		}
		g = &queueGate{}
		q.gates[ns] = g
	}
	was := g.on
	if g.on {
		g.on = staysOpen(members, g.held+extra)
	} else {
		g.on = opens(members, g.held, extra)
	}
	switch {
	case g.on && !was:
		q.open.Add(1)
	case was && !g.on:
		q.open.Add(-1)
	}
	return g.on
}

// opens reports whether a closed gate over members opens with held and
// extra prompt tokens more than the router's requests routed there and
// not yet prefilled: they reach the tokens the members' KV caches hold
// (all known), and the members' prefix caches hit less of the prompts
// than routing found matched (queueLost).
func opens(members []*fleet.Member, held, extra int64) bool {
	demand, capacity, reuse, hit, ok := cachePressure(members)
	return ok && demand+held+extra >= capacity && hit < queueLost*reuse
}

// staysOpen reports whether an open gate over members stays open with
// held prompt tokens more than those queued there: they reach half of
// what the members' caches hold (all known).
func staysOpen(members []*fleet.Member, held int64) bool {
	demand, capacity, _, _, ok := cachePressure(members)
	return ok && 2*(demand+held) >= capacity
}

// cachePressure sums the prompt tokens of the router's requests routed to
// members and not yet prefilled (demand) and the tokens their KV caches
// hold (capacity), and averages the share of a prompt routing found
// matched on them lately (reuse) and the share their prefix caches hit
// (hit); ok is false when a member's cache size is unknown.
func cachePressure(members []*fleet.Member) (demand, capacity int64, reuse, hit float64, ok bool) {
	for _, m := range members {
		c := m.Load.KVCapacity.Load()
		if c <= 0 {
			return 0, 0, 0, 0, false
		}
		capacity += c
		demand += m.Load.Queued.Load()
		reuse += m.Load.Reuse()
		hit += 1 - m.Load.MissShare()
	}
	n := float64(len(members))
	return demand, capacity, reuse / n, hit / n, len(members) > 0
}

// room reports whether the pod m takes another request while the router
// holds: fewer than Config.QueuePrefillsPerPod of the router's requests await
// their first token there, those released to it included. Called with
// q.mu.
func (r *Router) room(m *fleet.Member) bool {
	return m.Load.Prefilling.Load()+int64(r.queue.reserved[m.ID]) < int64(r.cfg.QueuePrefillsPerPod)
}

// release gives the pods with room the waiting requests that suit them
// best: each time a pod's request prefills, and when a request is queued.
// One goroutine releases at a time; a call meanwhile has it look again.
// The index is matched without the queue's lock, which the request path
// takes: with the redis index each match is a round trip.
func (r *Router) release() {
	q := &r.queue
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.releasing {
		q.again = true
		return
	}
	q.releasing = true
	for {
		q.again = false
		if !r.releaseOne() && !q.again {
			break
		}
	}
	q.releasing = false
	for i := range q.scan {
		q.scan[i].t = nil // keep no ticket alive
	}
}

// releaseOne releases the ticket whose namespace's gate closed, or the
// one of the Tuning.QueueScan oldest that finds the most of its prompt
// cached on a pod with room, to that pod; it reports whether it released
// one or must look again. Called with q.mu, which it drops while it
// matches the index.
func (r *Router) releaseOne() bool {
	q := &r.queue
	q.scan = q.scan[:0]
	for i, t := range q.waiting[:min(len(q.waiting), r.cfg.Tuning.QueueScan)] {
		if !q.gate(t.ev.ns, t.sc.members, 0) {
			q.hand(i, anyPod)
			return true
		}
		if len(q.scan) < cap(q.scan) {
			q.scan = q.scan[:len(q.scan)+1]
		} else {
			q.scan = append(q.scan, scanEntry{})
		}
		e := &q.scan[len(q.scan)-1]
		e.free = e.free[:0]
		for _, m := range t.sc.members {
			if r.room(m) {
				e.free = append(e.free, m.ID)
			}
		}
		if len(e.free) == 0 {
			q.scan = q.scan[:len(q.scan)-1]
			continue
		}
		e.t, e.ns, e.hashes = t, t.ev.ns, append(e.hashes[:0], t.sc.hashes...)
	}
	if len(q.scan) == 0 {
		return false
	}
	q.mu.Unlock()
	best, pod, blocks := -1, anyPod, -1
	for i := range q.scan {
		e := &q.scan[i]
		q.matches = r.index.Match(e.ns, e.hashes, e.free, q.matches)
		for j, m := range q.matches {
			if m.Blocks > blocks {
				best, pod, blocks = i, e.free[j], m.Blocks
			}
		}
	}
	q.mu.Lock()
	t := q.scan[best].t
	i := slices.Index(q.waiting, t)
	if i < 0 || !r.roomOn(pod, t.sc.members) {
		return true // it left, or the pod filled, while the index was matched: look again
	}
	q.hand(i, pod)
	return true
}

// roomOn reports whether pod, one of members, has room. Called with q.mu.
func (r *Router) roomOn(pod kvindex.PodID, members []*fleet.Member) bool {
	for _, m := range members {
		if m.ID == pod {
			return r.room(m)
		}
	}
	return false
}

// hand releases the waiting ticket at i to pod (anyPod: routed as
// usual). Called with q.mu.
func (q *requestQueue) hand(i int, pod kvindex.PodID) {
	t := q.waiting[i]
	q.remove(i)
	t.state, t.pod = ticketReleased, pod
	if pod != anyPod {
		q.reserved[pod]++
	}
	close(t.ready)
}

// remove takes the ticket at i out of the queue. Called with q.mu.
func (q *requestQueue) remove(i int) {
	t := q.waiting[i]
	copy(q.waiting[i:], q.waiting[i+1:])
	q.waiting[len(q.waiting)-1] = nil
	q.waiting = q.waiting[:len(q.waiting)-1]
	q.n.Add(-1)
	q.gates[t.ev.ns].held -= int64(t.ev.tokens)
	t.r.metrics.queued.Dec()
	t.r.metrics.waiting.WithLabelValues(t.ev.model).Dec()
}

// leave takes t out of the queue if it is still there, as state, and
// reports whether it was.
func (t *Ticket) leave(state ticketState) bool {
	q := &t.r.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.state != ticketWaiting {
		return false
	}
	for i, w := range q.waiting {
		if w == t {
			q.remove(i)
			break
		}
	}
	t.state = state
	return true
}

// Ready is closed when a pod has room for the request.
func (t *Ticket) Ready() <-chan struct{} { return t.ready }

// Since is when the request was held.
func (t *Ticket) Since() time.Time { return t.since }

// Expire ends the request's wait: Finish then routes it as if nothing were
// held. Nothing changes if a pod already has room for it.
func (t *Ticket) Expire() {
	if t.leave(ticketGone) {
		t.r.metrics.queueExits.WithLabelValues("expired").Inc()
	}
}

// Cancel gives up the request: it reports true when it left the queue
// (the ticket is done with), false when it was released already (call
// Finish, then end the decision).
func (t *Ticket) Cancel() bool {
	if !t.leave(ticketGone) {
		return false
	}
	t.r.metrics.queueExits.WithLabelValues("canceled").Inc()
	t.r.putScratch(t.sc)
	t.sc = nil
	return true
}

// Finish routes the request once Ready is closed or Expire was called: it
// matches and scores its candidates again, as they are now, and picks
// among them the pod it was released to (any pod, when expired or
// released by a closing gate, or when that pod is gone).
func (t *Ticket) Finish() (*Decision, error) {
	r := t.r
	sc := t.sc
	defer r.putScratch(sc)
	q := &r.queue
	q.mu.Lock()
	pod := t.pod
	if t.state == ticketReleased {
		exit := "released"
		if t.drained {
			exit = "drained"
		}
		r.metrics.queueExits.WithLabelValues(exit).Inc()
		if pod != anyPod {
			if q.reserved[pod]--; q.reserved[pod] <= 0 {
				delete(q.reserved, pod)
			}
		}
	}
	t.state = ticketGone
	q.mu.Unlock()
	held := r.now().Sub(t.since)
	r.metrics.queueWait.Observe(held.Seconds())
	start := time.Now()
	if _, err := r.resolve(r.fleet.Snapshot(), t.ev.model, true, t.req.Subset, start, sc); err != nil {
		return nil, err
	}
	ev := t.ev
	r.match(&ev, sc)
	r.cost(&ev, sc)
	var ok func(int) bool
	for _, m := range sc.members {
		if m.ID == pod {
			ok = func(i int) bool { return sc.members[i].ID == pod }
			break
		}
	}
	d := r.decide(t.req, ev, sc, ok, start.Add(-t.spent))
	d.Queued = held
	return d, nil
}

// wait is Route's wait for a held request.
func (t *Ticket) wait(ctx context.Context) (*Decision, error) {
	timer := time.NewTimer(t.r.cfg.QueueMaxWait)
	defer timer.Stop()
	select {
	case <-t.ready:
	case <-timer.C:
		t.Expire()
	case <-ctx.Done():
		if t.Cancel() {
			return nil, ctx.Err()
		}
	}
	d, err := t.Finish()
	if err == nil && ctx.Err() != nil { // released as the client left
		d.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		t.r.refuse(t.req, t.ev.model, err)
	}
	return d, err
}
