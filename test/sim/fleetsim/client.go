package fleetsim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Client is the load generator in front of the fleet. The zero value is
// open loop: every request is sent at its arrival time, whatever is in
// flight (a trace replay).
//
// The other settings model a benchmark tool like inference-perf: a pool
// of workers holds at most Concurrency requests in flight and sends a due
// request only when one of them frees a slot (its wait in the client
// counts toward no time to first token, which runs from the send); a
// request still streaming Timeout after its send is canceled, which
// aborts it on its pod; and with DrainStages each load level is a stage
// whose schedule starts only StageGap after every request of the previous
// stage has ended.
type Client struct {
	// Concurrency bounds the requests in flight (sent, not yet ended);
	// 0 is unbounded.
	Concurrency int
	// Timeout cancels a request this long after its send; 0 is never.
	Timeout time.Duration
	// DrainStages starts each level's schedule only after the previous
	// level's requests have all ended (finished, timed out or dropped).
	// The requests' arrival times are then offsets from their level's
	// start. It needs the requests ordered by level.
	DrainStages bool
	// StageGap is the pause between a drained level and the next one's
	// schedule.
	StageGap time.Duration
}

// Validate reports every problem of c at once.
func (c Client) Validate() error {
	var errs []error
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("client concurrency = %d, want >= 0", c.Concurrency))
	}
	if c.Timeout < 0 || c.StageGap < 0 {
		errs = append(errs, errors.New("client timeout and stage gap must be >= 0"))
	}
	return errors.Join(errs...)
}

// client is the load generator's state during a run.
type client struct {
	cfg       Client
	sched     []float64 // by request: when the client means to send it
	firstOf   []int     // by level: index of its first request
	started   []float64 // by level: when its schedule started
	remaining []int     // by level: requests not yet ended
	released  int       // requests [0, released) have their sched set
	queue     []int     // due requests waiting for a slot, oldest first
	inflight  int
}

// newClient prepares the client for w: in open loop every request is
// released at its arrival; draining stages release level 0 only.
func newClient(cfg Client, w *Workload) (*client, error) {
	c := &client{cfg: cfg, sched: make([]float64, len(w.Requests)), remaining: make([]int, len(w.Levels))}
	c.firstOf = make([]int, len(w.Levels)+1)
	c.started = make([]float64, len(w.Levels))
	for i := range c.started {
		c.started[i] = math.NaN()
	}
	last := 0
	for i := range w.Requests {
		l := w.Requests[i].Level
		if l < last || l >= len(w.Levels) {
			return nil, fmt.Errorf("fleetsim: request %d of level %d after level %d (of %d)", i, l, last, len(w.Levels))
		}
		for ; last < l; last++ {
			c.firstOf[last+1] = i
		}
		c.remaining[l]++
	}
	for ; last < len(w.Levels); last++ {
		c.firstOf[last+1] = len(w.Requests)
	}
	if !cfg.DrainStages {
		for i := range w.Requests {
			c.sched[i] = w.Requests[i].Arrival
		}
		c.released = len(w.Requests)
		for li, l := range w.Levels {
			c.started[li] = l.Start
		}
	}
	return c, nil
}

// startLevel releases level li's requests, scheduled from now.
func (s *Sim) startLevel(li int) {
	c := s.client
	c.started[li] = s.now
	l := s.w.Levels[li]
	for i := c.firstOf[li]; i < c.firstOf[li+1]; i++ {
		c.sched[i] = s.now + s.w.Requests[i].Arrival - l.Start
	}
	c.released = c.firstOf[li+1]
	if c.remaining[li] == 0 && li+1 < len(s.w.Levels) { // an empty level ends at once
		s.push(event{at: s.now + c.cfg.StageGap.Seconds(), kind: evLevel, level: li + 1})
	}
}

// offer is request i coming due: sent now if a slot is free, else queued.
func (s *Sim) offer(i int) {
	c := s.client
	if c.cfg.Concurrency > 0 && c.inflight >= c.cfg.Concurrency {
		c.queue = append(c.queue, i)
		return
	}
	s.send(i)
}

// send hands request i to the fleet now.
func (s *Sim) send(i int) {
	s.client.inflight++
	r := &s.w.Requests[i]
	if !s.arrive(r) {
		s.dropped++
		s.ended(i)
		return
	}
	if t := s.client.cfg.Timeout; t > 0 {
		s.push(event{at: s.now + t.Seconds(), kind: evTimeout, req: i})
	}
}

// ended frees request i's slot for the oldest queued request and, when
// it was the last of a draining level, schedules the next level.
func (s *Sim) ended(i int) {
	c := s.client
	c.inflight--
	l := s.w.Requests[i].Level
	c.remaining[l]--
	if len(c.queue) > 0 {
		j := c.queue[0]
		c.queue = c.queue[1:]
		s.send(j)
	}
	if c.cfg.DrainStages && c.remaining[l] == 0 && l+1 < len(s.w.Levels) {
		s.push(event{at: s.now + c.cfg.StageGap.Seconds(), kind: evLevel, level: l + 1})
	}
}

// timeout cancels request i if it is still streaming: the client gives
// up and its pod aborts it, as vLLM does when the client disconnects.
func (s *Sim) timeout(i int) {
	q := &s.seqs[i]
	if q.finish > 0 || q.aborted {
		return
	}
	q.aborted, q.ended = true, s.now
	if q.pod >= 0 {
		s.pods[q.pod].aborts++
	}
	if pq := q.prefill; pq != nil && pq.target >= 0 { // still on its prefill pod
		pq.aborted = true
		s.pods[pq.pod].aborts++
	}
	s.open--
	s.policy.Finished(q.req)
	s.ended(i)
}

// pending says whether the client has requests left to send.
func (c *client) pending(next int) bool {
	return next < len(c.sched) || len(c.queue) > 0
}
