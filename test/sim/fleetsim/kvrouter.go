package fleetsim

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// simModel is the model every simulated pod serves.
const simModel = "sim"

// RouterConfig is the router configuration the kvrouter policy runs with:
// the defaults, with the prefill cost set to the fleet's prefill speed and
// attention surcharge (as an operator sets them from measurements), ties
// broken by the sim's seeded source, and the fleet's P/D threshold.
func RouterConfig(s *Sim) router.Config {
	c := router.DefaultConfig()
	c.PrefillTokensPerSecond = s.Config().PrefillTokensPerSecond
	c.Tuning.PrefillAttentionPerToken = s.Config().AttentionPerToken
	c.IntN = s.Rand().IntN
	c.Now = s.Clock
	c.PDThresholdTokens = s.Config().PDThreshold
	return c
}

// kvRouter is kvrouter's real router over its real index: requests go
// through Router.Route as completion bodies whose prompt names the
// request, which the simulated tokenizer turns into the request's token
// ids (parsing thousands of ids as JSON would only slow the run down; the
// router tokenizes text prompts the same way in production), KV events reach
// the index after the fleet's delay, scrapes fill the fleet's Load, and
// the index's clock is the sim's.
type kvRouter struct {
	*eventIndex
	s         *Sim
	fleet     *fleet.Fleet
	r         *router.Router
	byName    map[string]int
	decisions []*router.Decision // by request ID
	// tickets are the requests the router holds (router.Ticket), oldest
	// first; held maps a held request's ID to its ticket.
	tickets []heldRequest
	held    map[int]*router.Ticket
	maxWait time.Duration // router.Config.QueueMaxWait
	body    []byte
	// learn is kvrouter-learned's: the scrapes' prefill counters teach
	// each pod's speed, as fleet.Scraper does. sample, kvrouter-learned's
	// and kvrouter-exact's: speeds samples what the router prices each
	// pod at.
	learn, sample bool
	estimates     []fleet.SpeedEstimator
	speeds        []SpeedSample
	sampledAt     float64
}

// speedSampleEvery is how often kvrouter-learned samples its speeds.
const speedSampleEvery = 5.0 // seconds

// promptPrefix starts every simulated prompt; the request ID follows.
const promptPrefix = "fleetsim request "

// simTokenizer gives a simulated prompt's token ids.
type simTokenizer struct{ w *Workload }

func (t simTokenizer) AppendTokens(dst []uint32, _ string, p *router.Parsed) ([]uint32, error) {
	id, err := strconv.Atoi(strings.TrimPrefix(p.Prompt, promptPrefix))
	if err != nil || id < 0 || id >= len(t.w.Requests) {
		return dst, fmt.Errorf("fleetsim: prompt %q names no request", p.Prompt)
	}
	return t.w.Requests[id].AppendTokens(dst), nil
}

// newKVRouter builds the policy over an eventIndex.
func newKVRouter(s *Sim) (*kvRouter, error) { return newKVRouterConfig(s, RouterConfig(s)) }

// newKVRouterConfig builds the policy with the router configured by rc.
func newKVRouterConfig(s *Sim, rc router.Config) (*kvRouter, error) {
	ei, err := newEventIndex(s)
	if err != nil {
		return nil, err
	}
	hasher, err := blockhash.NewHasher(s.w.Hash)
	if err != nil {
		return nil, err
	}
	p := &kvRouter{eventIndex: ei, s: s, fleet: fleet.New(ei.index), byName: map[string]int{}, decisions: make([]*router.Decision, len(s.w.Requests)), maxWait: rc.QueueMaxWait}
	for i := range s.Pods() {
		name := podName(i)
		var role kvpod.Role
		if roles := s.Config().Roles; len(roles) > 0 {
			role = roles[i]
		}
		p.fleet.Upsert(kvpod.Pod{Name: name, IP: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8000, Model: simModel, Role: role, Ready: true})
		p.byName[name] = i
	}
	p.r, err = router.New(rc, p.fleet, ei.index, hasher, simTokenizer{s.w}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newLearnedKVRouter is kvrouter-learned: the policy learning each pod's
// prefill speed from its scraped counters.
func newLearnedKVRouter(s *Sim) (*kvRouter, error) {
	p, err := newKVRouter(s)
	if err != nil {
		return nil, err
	}
	p.learn, p.sample, p.estimates = true, true, make([]fleet.SpeedEstimator, s.Pods())
	return p, nil
}

// newExactKVRouter is kvrouter-exact: kvrouter told each pod's prefill
// speed (Config.Speeds) at the start, as a learned speed worth
// exactSpeedSeconds of prefill against the prior's fleet.PriorSeconds, and
// learning nothing more: the most that learning speeds can give.
func newExactKVRouter(s *Sim) (*kvRouter, error) {
	p, err := newKVRouter(s)
	if err != nil {
		return nil, err
	}
	perToken := 1 / s.cfg.PrefillTokensPerSecond
	for i := range s.Pods() {
		busy := exactSpeedSeconds
		p.fleet.Load(podName(i)).SetSpeed(&fleet.Speed{Busy: busy, Tokens: busy * s.cfg.speed(i) / perToken})
	}
	p.sample = true
	return p, nil
}

// exactSpeedSeconds is the prefill time kvrouter-exact's speeds stand for:
// the prior moves them by under a millionth.
const exactSpeedSeconds = 1e6

// newMeanKVRouter is kvrouter-mean: kvrouter pricing every pod at the
// fleet's mean prefill speed (Config.Speeds), the single figure an
// operator who knew the fleet's mix of pods would set.
func newMeanKVRouter(s *Sim) (*kvRouter, error) {
	rc := RouterConfig(s)
	mean := 0.0
	for i := range s.Pods() {
		mean += s.cfg.speed(i) / float64(s.Pods())
	}
	rc.PrefillTokensPerSecond *= mean
	return newKVRouterConfig(s, rc)
}

// heldRequest is a request the router holds.
type heldRequest struct {
	r *Request
	t *router.Ticket
}

// Hold begins r's decision (Router.Begin, as Route does): the router
// decides now, and Pick returns the pod, or holds it until Release.
func (p *kvRouter) Hold(r *Request) bool {
	d, t, body := begin(p.r, r, p.body)
	p.body = body
	if t == nil {
		p.decisions[r.ID] = d
		return false
	}
	if p.held == nil {
		p.held = map[int]*router.Ticket{}
	}
	p.held[r.ID] = t
	p.tickets = append(p.tickets, heldRequest{r, t})
	return true
}

// Pick is the pod of r's decision, which Hold made.
func (p *kvRouter) Pick(r *Request) int { return p.byName[p.decisions[r.ID].Pod] }

// Release routes the first held request whose ticket is ready, or whose
// wait passed router.Config.QueueMaxWait (Route's timer, on the sim's
// clock).
func (p *kvRouter) Release() (*Request, int, bool) {
	now := p.s.Clock()
	for i, h := range p.tickets {
		select {
		case <-h.t.Ready():
		default:
			if now.Sub(h.t.Since()) < p.maxWait {
				continue
			}
			h.t.Expire()
		}
		p.tickets = append(p.tickets[:i], p.tickets[i+1:]...)
		delete(p.held, h.r.ID)
		d, err := h.t.Finish()
		if err != nil {
			panic(fmt.Sprintf("fleetsim: route held request %d: %v", h.r.ID, err)) // pods never leave a sim
		}
		p.decisions[h.r.ID] = d
		return h.r, p.byName[d.Pod], true
	}
	return nil, 0, false
}

// PrefillPod is the prefill pod of r's decision (Decision.PrefillPod),
// which the router names when its decode pod lacks at least
// router.Config.PDThresholdTokens tokens of the prompt; -1 when it names none.
func (p *kvRouter) PrefillPod(r *Request) int {
	if name := p.decisions[r.ID].PrefillPod; name != "" {
		return p.byName[name]
	}
	return -1
}

// Started is the first response byte, where extproc calls Prefilled: with
// a prefill pod, the decode pod's first token.
func (p *kvRouter) Started(r *Request) { p.decisions[r.ID].Prefilled() }

// Finished is the end of the response stream, where extproc calls Done.
func (p *kvRouter) Finished(r *Request) {
	if t := p.held[r.ID]; t != nil { // the client gave up on it while held
		delete(p.held, r.ID)
		p.tickets = slices.DeleteFunc(p.tickets, func(h heldRequest) bool { return h.t == t })
		if !t.Cancel() {
			if d, err := t.Finish(); err == nil {
				d.Done()
			}
		}
		return
	}
	p.decisions[r.ID].Done()
	p.decisions[r.ID] = nil
}

// Scraped stores the metrics in the fleet's Load, as fleet.Scraper does.
// kvrouter-learned also feeds each pod's prefill counters to its
// SpeedEstimator, on the sim's clock; it and kvrouter-exact sample the
// speeds they price the pods at.
func (p *kvRouter) Scraped(m []Metrics) {
	now := p.s.Now()
	at := p.s.Clock()
	sample := p.sample && now >= p.sampledAt+speedSampleEvery
	if sample {
		p.sampledAt = now
	}
	for i, x := range m {
		l := p.fleet.Load(podName(i))
		x.store(l, at)
		if p.learn {
			if sp := p.estimates[i].Observe(at, x.Prefill); sp != nil {
				l.SetSpeed(sp)
			}
		}
		if sample {
			p.speeds = append(p.speeds, SpeedSample{At: now, Pod: i, TokensPerSecond: 1 / p.r.PrefillSecondsPerToken(l)})
		}
	}
}

// store keeps the scraped figures in l, as the fleet's Scraper does
// (fleet.Queue's store), on the sim's clock at.
func (x Metrics) store(l *fleet.Load, at time.Time) {
	l.Waiting.Store(int64(x.Waiting))
	l.Running.Store(int64(x.Running))
	l.KVUsagePermille.Store(int64(x.KVUsage * 1000))
	l.KVCapacity.Store(int64(x.KVTokens))
	l.ObserveCache(at, x.Prefill)
}

// Speeds is what kvrouter-learned priced each pod at over the run.
func (p *kvRouter) Speeds() []SpeedSample { return p.speeds }

// podName is pod i's name in the policies' indexes and fleets.
func podName(i int) string { return fmt.Sprintf("pod-%03d", i) }

// eventIndex is a real kvindex fed by the pods' KV events, as kvrouter's
// subscribers feed it, on the sim's clock: the policies that read the
// pods' caches through their events share it.
type eventIndex struct {
	index *kvindex.Index
	pods  []kvindex.PodID
	batch []uint64
}

// newEventIndex builds the index (the default config with fewer shards:
// speculative entries live while their request waits for prefill, up to
// 60 s, and 2 s after Prefilled) with every pod registered.
func newEventIndex(s *Sim) (*eventIndex, error) {
	icfg := kvindex.DefaultConfig()
	icfg.Shards = 16
	icfg.Now = s.Clock
	index, err := kvindex.New(icfg, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	e := &eventIndex{index: index}
	for i := range s.Pods() {
		e.pods = append(e.pods, index.AddPod(podName(i), simModel))
	}
	return e, nil
}

// KVEvents applies a step's events to the index in order, a run of the
// same kind at a time.
func (p *eventIndex) KVEvents(pod int, events []kvEvent) {
	p.batch = eachRun(events, p.batch, func(stored bool, hashes []uint64) {
		applyRun(p.index, p.pods[pod], stored, hashes)
	})
}

// eachRun calls apply with the hashes of each run of events of the same
// kind (stored or removed), in order, gathered in batch, which it returns
// for reuse.
func eachRun(events []kvEvent, batch []uint64, apply func(stored bool, hashes []uint64)) []uint64 {
	for len(events) > 0 {
		n := 1
		for n < len(events) && events[n].stored == events[0].stored {
			n++
		}
		batch = batch[:0]
		for _, e := range events[:n] {
			batch = append(batch, e.hash)
		}
		apply(events[0].stored, batch)
		events = events[n:]
	}
	return batch
}

// eventApplier is what applyRun writes to: kvindex.Index, or a replica's
// shared index.
type eventApplier interface {
	Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error
	Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error
}

// applyRun applies one run of events to pod's GPU tier in idx.
func applyRun(idx eventApplier, pod kvindex.PodID, stored bool, hashes []uint64) {
	var err error
	if stored {
		err = idx.Stored(pod, kvindex.TierGPU, hashes)
	} else {
		err = idx.Removed(pod, kvindex.TierGPU, hashes)
	}
	if err != nil {
		panic(fmt.Sprintf("fleetsim: index event: %v", err)) // pods are never removed
	}
}

// begin begins r's decision through rt (Router.Begin) as a completion
// body whose prompt names the request (simTokenizer reads it), built in
// body, which it returns for reuse: the decision, or the ticket of a
// request the router holds.
func begin(rt *router.Router, r *Request, body []byte) (*router.Decision, *router.Ticket, []byte) {
	body = append(body[:0], `{"model":"`+simModel+`","prompt":"`+promptPrefix...)
	body = strconv.AppendInt(body, int64(r.ID), 10)
	body = append(body, `"}`...)
	d, t, err := rt.Begin(router.Request{ID: strconv.Itoa(r.ID), Path: "/v1/completions", Body: body})
	if err != nil {
		panic(fmt.Sprintf("fleetsim: route request %d: %v", r.ID, err)) // a bug of the simulator's request
	}
	return d, t, body
}
