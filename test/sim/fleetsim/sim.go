package fleetsim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvrouter/kvrouter/router/fleet"
)

// Policy picks a pod for each request and hears how its requests go.
type Policy interface {
	// Pick returns the index of the pod r goes to.
	Pick(r *Request) int
	// Started is called when r's first output token comes out.
	Started(r *Request)
	// Finished is called when r's last output token comes out.
	Finished(r *Request)
}

// eventListener is a Policy that reads the pods' KV events.
type eventListener interface {
	KVEvents(pod int, events []kvEvent)
}

// phased is a Policy whose metrics scrapes run the given fraction of a
// scrape interval later than everyone else's.
type phased interface{ scrapePhase() float64 }

// scrapeListener is a Policy that reads the pods' scraped metrics.
type scrapeListener interface {
	Scraped(m []Metrics)
}

// Metrics is what a pod's /metrics reports.
type Metrics struct {
	Waiting int     // vllm:num_requests_waiting
	Running int     // vllm:num_requests_running
	KVUsage float64 // vllm:kv_cache_usage_perc
	// KVTokens is the tokens its KV cache holds (vllm:cache_config_info).
	KVTokens int
	// Prefill is its prefill counters (prompt tokens, prefix-cache
	// queries and hits, prefill time), from which a router learns its
	// speed.
	Prefill fleet.Counters
}

// NewPolicy builds a policy for a sim.
type NewPolicy func(s *Sim) (Policy, error)

// Outcome is how one request went. Times are seconds since the start.
type Outcome struct {
	Pod       int
	Scheduled float64 // when the client meant to send it
	Arrival   float64 // when the client sent it: time to first token runs from here
	First     float64 // first token; 0 when it never came
	Finish    float64 // last token; 0 when it never came
	TimedOut  bool    // the client canceled it (Client.Timeout)
	Hit       int     // prompt blocks cached on arrival at the pod that computed the prompt
	Blocks    int     // full prompt blocks
	Output    int     // output tokens
	// Hop says a prefill pod computed the prompt: pod Prefill, whose KV
	// took Transfer seconds to reach Pod. False when Pod computed it.
	Hop      bool
	Prefill  int
	Transfer float64
}

// Result is a whole run.
type Result struct {
	Outcomes    []Outcome // by request ID
	LevelStarts []float64 // by level: when its schedule started
	Dropped     int       // requests too large for a pod's cache
	TimedOut    int       // requests the client canceled
	Preemptions int
	End         float64 // when the last request ended
	// Speeds is what a policy that prices each pod at its own prefill
	// speed (kvrouter-learned, kvrouter-exact) priced them at over the
	// run; nil for the others.
	Speeds []SpeedSample
}

// SpeedSample is the prefill speed a policy priced a pod at, at a moment.
type SpeedSample struct {
	At              float64 // seconds since the start
	Pod             int
	TokensPerSecond float64 // at no context
}

// speedLearner is a Policy that learns the pods' prefill speeds.
type speedLearner interface {
	Speeds() []SpeedSample
}

// Sim is one run in progress: the fleet, the clock, the event queue.
type Sim struct {
	cfg     Config
	w       *Workload
	pods    []*pod
	seqs    []seq
	now     float64
	rng     *rand.Rand
	events  eventHeap
	nextSeq uint64
	open    int // requests arrived and not finished
	next    int // the next request to come due
	dropped int
	metrics []Metrics
	policy  Policy
	client  *client
	done    []int // requests a step finished
}

type event struct {
	at    float64
	order uint64
	kind  uint8
	pod   int
	req   int // evTimeout
	level int // evLevel
	kv    []kvEvent
}

const (
	evStep uint8 = iota
	evKV
	evScrape
	evTimeout  // the client cancels a request
	evLevel    // a draining client starts a level's schedule
	evTransfer // a request's KV reached its decode pod
)

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].order < h[j].order
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Run simulates w on a fleet configured by cfg with the policy newPolicy
// builds, until every request has finished.
func Run(cfg Config, w *Workload, newPolicy NewPolicy) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := newClient(cfg.Client, w)
	if err != nil {
		return nil, err
	}
	if w.BlockSize != cfg.BlockSize {
		return nil, fmt.Errorf("fleetsim: workload hashed with block size %d, fleet uses %d", w.BlockSize, cfg.BlockSize)
	}
	s := &Sim{cfg: cfg, w: w, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), metrics: make([]Metrics, cfg.Pods), client: c}
	for i := range cfg.Pods {
		s.pods = append(s.pods, newPod(&s.cfg, cfg.speed(i)))
	}
	s.seqs = make([]seq, len(w.Requests))
	p, err := newPolicy(s)
	if err != nil {
		return nil, err
	}
	if _, ok := p.(disaggregator); !ok && cfg.prefills() {
		return nil, fmt.Errorf("fleetsim: policy %T names no prefill pods, and the fleet has some", p)
	}
	s.policy = p
	return s.loop(), nil
}

// Pods is the number of pods.
func (s *Sim) Pods() int { return len(s.pods) }

// Now is the simulated time in seconds.
func (s *Sim) Now() float64 { return s.now }

// Clock is the simulated time as a time.Time, from the Unix epoch: the
// clock the index and the router read in a run.
func (s *Sim) Clock() time.Time {
	return time.Unix(0, 0).Add(time.Duration(s.now * float64(time.Second)))
}

// Config is the fleet's configuration.
func (s *Sim) Config() Config { return s.cfg }

// Rand is the run's seeded random source.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Metrics is the latest scrape of every pod.
func (s *Sim) Metrics() []Metrics { return s.metrics }

func (s *Sim) push(e event) {
	e.order = s.nextSeq
	s.nextSeq++
	heap.Push(&s.events, e)
}

func (s *Sim) loop() *Result {
	first := 0.0
	if p, ok := s.policy.(phased); ok {
		first = p.scrapePhase() * s.cfg.ScrapeInterval.Seconds()
	}
	s.push(event{at: first, kind: evScrape})
	c := s.client
	if c.cfg.DrainStages && len(s.w.Levels) > 0 {
		s.startLevel(0)
	}
	for s.next < c.released || s.events.Len() > 0 {
		if s.next < c.released && (s.events.Len() == 0 || c.sched[s.next] <= s.events[0].at) {
			i := s.next
			s.next++
			s.now = max(s.now, c.sched[i])
			s.offer(i)
			continue
		}
		e := heap.Pop(&s.events).(event)
		s.now = e.at
		switch e.kind {
		case evStep:
			s.endStep(e.pod)
		case evKV:
			if l, ok := s.policy.(eventListener); ok {
				l.KVEvents(e.pod, e.kv)
			}
		case evScrape:
			s.scrape()
			s.release()
			if s.open > 0 || c.pending(s.next) {
				s.push(event{at: s.now + s.cfg.ScrapeInterval.Seconds(), kind: evScrape})
			}
		case evTimeout:
			s.timeout(e.req)
		case evLevel:
			s.startLevel(e.level)
		case evTransfer:
			s.transferred(e.pod, e.req)
		}
	}
	return s.result()
}

// result collects the run's outcomes.
func (s *Sim) result() *Result {
	res := &Result{Outcomes: make([]Outcome, len(s.w.Requests)), Dropped: s.dropped, LevelStarts: s.client.started}
	for i := range s.seqs {
		q := &s.seqs[i]
		if q.req == nil { // dropped
			continue
		}
		o := Outcome{
			Pod: q.pod, Scheduled: s.client.sched[i], Arrival: q.sent, First: max(q.first, 0), Finish: q.finish,
			TimedOut: q.aborted, Hit: max(q.hit, 0), Blocks: len(q.req.Hashes), Output: q.req.Output,
		}
		if pq := q.prefill; pq != nil {
			o.Hop, o.Prefill, o.Hit, o.Transfer = true, pq.pod, max(pq.hit, 0), q.transfer
		}
		if q.aborted {
			o.Output = q.out
			res.TimedOut++
		}
		res.Outcomes[i] = o
		res.End = max(res.End, q.ended)
	}
	for _, p := range s.pods {
		res.Preemptions += p.preempt
	}
	if l, ok := s.policy.(speedLearner); ok {
		res.Speeds = l.Speeds()
	}
	return res
}

// arrive routes r and queues it on its pod; false when it can never fit.
func (s *Sim) arrive(r *Request) bool {
	if (r.Prompt+r.Output-1+s.cfg.BlockSize-1)/s.cfg.BlockSize > s.cfg.Blocks { // the last token needs no KV
		return false
	}
	if h, ok := s.policy.(holder); ok && h.Hold(r) {
		q := &s.seqs[r.ID]
		*q = seq{req: r, pod: -1, sent: s.now, target: r.Prompt, hit: -1, first: -1}
		s.open++
		return true
	}
	i := s.policy.Pick(r)
	q := &s.seqs[r.ID]
	*q = seq{req: r, pod: i, sent: s.now, target: r.Prompt, hit: -1, first: -1}
	s.open++
	if j := s.prefillPod(r); j >= 0 {
		q.prefill = &seq{req: r, pod: j, sent: s.now, target: r.Prompt, hit: -1, first: -1, prefillOnly: true}
		s.enqueue(q.prefill)
		return true
	}
	s.enqueue(q)
	return true
}

// enqueue queues q on its pod.
func (s *Sim) enqueue(q *seq) {
	p := s.pods[q.pod]
	p.waiting = append(p.waiting, q)
	if !p.busy {
		s.startStep(q.pod)
	}
}

// startStep schedules pod i's next step, if it has work.
func (s *Sim) startStep(i int) {
	p := s.pods[i]
	p.now = s.now
	d, ok := p.schedule()
	p.busy = ok
	if ok {
		s.push(event{at: s.now + d, kind: evStep, pod: i})
	}
	for _, q := range p.pulls {
		q.transfer = s.cfg.transferSeconds(q.pulled)
		s.push(event{at: s.now + q.transfer, kind: evTransfer, pod: i, req: q.req.ID})
	}
	p.pulls = p.pulls[:0]
}

// endStep applies pod i's finished step, publishes its KV events and
// starts the next step.
func (s *Sim) endStep(i int) {
	p := s.pods[i]
	done := s.done[:0]
	var handed []*seq
	p.finishStep(s.now, func(q *seq) {
		if !q.prefillOnly {
			s.policy.Started(q.req)
		}
	}, func(q *seq) {
		if q.prefillOnly {
			handed = append(handed, q)
			return
		}
		q.finish, q.ended = s.now, s.now
		s.open--
		s.policy.Finished(q.req)
		done = append(done, q.req.ID)
	})
	s.publish(i)
	for _, q := range handed { // after the step's events, as the prefill pod's answer follows its step
		s.handOff(q)
	}
	for _, id := range done { // the freed slots send queued requests, this pod's after its step
		s.ended(id)
	}
	s.done = done
	s.startStep(i)
	s.release()
}

// holder is a Policy that may keep a request in the router rather than
// pick its pod at once (router.Config.QueuePrefillsPerPod).
type holder interface {
	// Hold reports whether r waits in the router; when not, Pick picks
	// its pod.
	Hold(r *Request) bool
	// Release returns the next waiting request to send now and its pod;
	// ok is false when none is to go.
	Release() (r *Request, pod int, ok bool)
}

// release sends the requests a holder lets go: after each step, whose
// first tokens and ends free room on its pod, and at each scrape.
func (s *Sim) release() {
	h, ok := s.policy.(holder)
	if !ok {
		return
	}
	for {
		r, i, ok := h.Release()
		if !ok {
			return
		}
		q := &s.seqs[r.ID]
		if q.aborted {
			continue
		}
		q.pod = i
		s.enqueue(q)
	}
}

// publish sends pod i's KV events since the last publish to a policy
// that reads them, after the fleet's event delay.
func (s *Sim) publish(i int) {
	if ev := s.pods[i].cache.drain(); len(ev) > 0 {
		if _, ok := s.policy.(eventListener); ok {
			s.push(event{at: s.now + s.cfg.EventDelay.Seconds(), kind: evKV, pod: i, kv: ev})
		}
	}
}

// scrape refreshes every pod's metrics and tells a policy that reads them.
// Requests waiting for their KV to arrive count as waiting, as vLLM counts
// them.
func (s *Sim) scrape() {
	for i, p := range s.pods {
		s.metrics[i] = Metrics{Waiting: len(p.waiting) + len(p.pulling), Running: len(p.running), KVUsage: p.cache.usage(), KVTokens: p.cfg.Blocks * p.cfg.BlockSize, Prefill: p.counters}
	}
	if l, ok := s.policy.(scrapeListener); ok {
		l.Scraped(s.metrics)
	}
}
