package router

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// Decision is where one request goes. Call Prefilled when the pod's first
// response byte arrives and Done when the request ends.
type Decision struct {
	RequestID string
	API       Kind // the API of the request's path
	Model     string
	Pod       string
	Address   string // ip:port for x-gateway-destination-endpoint
	// PrefillPod and PrefillAddress name the prefill pod that computes the
	// prompt before Pod decodes (prefill/decode disaggregation; see
	// PrefillHeader); "" when Pod computes it itself.
	PrefillPod, PrefillAddress string
	// DPRank is the data-parallel rank chosen on the pod's server, sent to it
	// as X-data-parallel-rank (RankHeader); -1 unless the pod is one rank of
	// a server running several.
	DPRank  int
	Matched int // leading prompt blocks cached on the chosen pod
	Total   int // full blocks of the prompt
	Tokens  int // prompt tokens, 0 when unknown
	Reason  Reason
	Elapsed time.Duration // the decision's own time, without Queued
	Stages  Stages        // where Elapsed went
	// Queued is how long the request waited in kvrouter's queue
	// (Config.QueuePrefillsPerPod); 0 when it did not wait.
	Queued time.Duration
	// Fallbacks are the next best endpoints, in order, when
	// Config.DestinationEndpoints > 1: the proxy tries them if Address fails, and
	// Served moves the decision to the one that served.
	Fallbacks []string
	alts      []alternate

	load      *fleet.Load
	prefill   int64 // prefill work charged to the pod's queue, in tokens at no context
	router    *Router
	pod       kvindex.PodID
	spec      *hashBuf // the block hashes speculated on pod; nil when none
	hop       *prefillHop
	prefilled atomic.Bool
	done      atomic.Bool
	// started is when the decision's evaluation began; traceparent and
	// tracestate, the W3C trace context of its span for the pod's request
	// ("" with tracing off).
	started                 time.Time
	traceparent, tracestate string
}

// alternate is a fallback pod: what moving the decision to it takes.
type alternate struct {
	member  *fleet.Member
	matched int
	work    int64
}

// hashBuf holds a decision's speculated block hashes until Prefilled.
type hashBuf struct{ h []uint64 }

// Prefilled releases the decision's prefill work from the pod's predicted
// queue and settles its speculative index entries, those of blocks no
// other decision waiting on the pod speculated (fleet.SpecLedger): they
// count only for the index's grace period more, in which the pod's own KV
// events confirm the blocks it computed. Safe to call more than once.
func (d *Decision) Prefilled() {
	if d.load == nil || !d.prefilled.CompareAndSwap(false, true) {
		return
	}
	if d.hop != nil {
		d.hop.prefilled(d.router)
	} else {
		d.router.charge(d.load, d.pod, -d.prefill, -int64(d.Tokens), -1)
	}
	if b := d.spec; b != nil {
		d.spec = nil
		d.router.settle(d.load, d.pod, b)
	}
	d.router.release()
}

// Served moves the decision to the fallback at address, the endpoint the
// proxy reports served the request after the pick failed: the request's
// in-flight count, its prefill work and its speculative index entries go
// to that pod (the pick's entries are settled, so they lapse after the
// index's grace period). It reports whether it moved; the pick itself, an
// endpoint that is no fallback, or a decision already done change nothing.
// Call it from the goroutine that calls Prefilled and Done.
func (d *Decision) Served(address string) bool {
	if d.load == nil || address == "" || address == d.Address || d.done.Load() {
		return false
	}
	i := slices.IndexFunc(d.alts, func(a alternate) bool { return a.member.Endpoint == address })
	if i < 0 {
		return false
	}
	a := d.alts[i]
	m := a.member
	d.load.InFlight.Add(-1)
	m.Load.InFlight.Add(1)
	if !d.prefilled.Load() {
		if d.hop == nil { // with a hop, the prefill pod keeps the prefill work
			d.router.charge(d.load, d.pod, -d.prefill, -int64(d.Tokens), -1)
			d.router.charge(m.Load, m.ID, a.work, int64(d.Tokens), 1)
		}
		if b := d.spec; b != nil {
			r := d.router
			old := r.hashBuf()
			old.h = append(old.h, b.h...)
			if err := r.speculate(m.Load, m.ID, b.h, true); err != nil {
				if !errors.Is(err, kvindex.ErrUnknownPod) {
					r.logger.Warn("speculative entries not moved", "pod", m.Pod.Name, "error", err)
				}
				d.spec = nil // nothing to settle there
				r.specs.Put(b)
			}
			r.settle(d.load, d.pod, old)
		}
	}
	d.router.metrics.moved.Inc()
	d.load, d.pod = m.Load, m.ID
	if d.hop == nil {
		d.prefill = a.work
	}
	d.Pod, d.Address, d.Matched, d.DPRank = m.Pod.Name, m.Endpoint, a.matched, rankOf(m)
	return true
}

// Done ends the request on its pod; a request that ends unprefilled (an
// error, an abort) settles its speculative entries too. Safe to call more
// than once.
func (d *Decision) Done() {
	d.Prefilled()
	if d.load != nil && d.done.CompareAndSwap(false, true) {
		d.load.InFlight.Add(-1)
	}
}

// charge adds prefill routed to a pod, not yet done, to its load, and
// shares it with the other replicas when the index does.
//
// The pod begins a request's prefill when nothing of the router's is
// ahead of it there: when it arrives at an idle pod, or when the one
// before it is prefilled (or moves away). Load.PrefillSince keeps that
// time for queue.
// The time is stored before the count shows the change, so that a queue
// read in between takes the new request for one just begun, not for one
// the pod has worked on since it was last busy.
func (r *Router) charge(l *fleet.Load, pod kvindex.PodID, tokens, prompt, requests int64) {
	l.PrefillTokens.Add(tokens)
	l.Queued.Add(prompt)
	if prompt > 0 {
		l.Charged.Add(int64(float64(prompt*fleet.ChargedUnit) * l.MissShare()))
	}
	now := r.now().UnixNano()
	for {
		n := l.Prefilling.Load()
		if n+requests > 0 && (requests < 0 || n == 0) {
			l.PrefillSince.Store(now)
		}
		if l.Prefilling.CompareAndSwap(n, n+requests) {
			break
		}
	}
	if r.sharer != nil {
		r.sharer.Charge(pod, tokens, requests)
	}
}

// hashBuf is an empty recycled hashBuf.
func (r *Router) hashBuf() *hashBuf {
	b, _ := r.specs.Get().(*hashBuf)
	if b == nil {
		return &hashBuf{}
	}
	b.h = b.h[:0]
	return b
}

// speculate counts a decision's speculation of hashes in the ledger of
// pod, whose load l is, and records in the index the blocks the ledger
// says it must (fleet.SpecLedger): those no other decision in flight
// there speculated, and those last recorded r.refresh ago; all of them
// when held says the pod holds some of them for real (its store of a
// block ended the speculative entry a decision before made, and the
// entry under the real one is what keeps the block counted should the
// pod evict it while the request waits). On an error it counts nothing.
func (r *Router) speculate(l *fleet.Load, pod kvindex.PodID, hashes []uint64, held bool) error {
	tell := r.hashBuf()
	tell.h = l.Spec.Claim(tell.h, hashes, r.now(), r.refresh, held, l.Charged.Load())
	var err error
	if len(tell.h) > 0 {
		err = r.index.Speculate(pod, tell.h)
	}
	if err != nil {
		l.Spec.Release(tell.h[:0], hashes)
	}
	r.specs.Put(tell)
	return err
}

// settle ends a decision's speculation of b's hashes on pod (whose load
// l is): the index shortens to its grace period the entries of the blocks
// no other decision in flight there speculated. It recycles b.
func (r *Router) settle(l *fleet.Load, pod kvindex.PodID, b *hashBuf) {
	if tell := l.Spec.Release(b.h[:0], b.h); len(tell) > 0 {
		if err := r.index.Settle(pod, tell); err != nil && !errors.Is(err, kvindex.ErrUnknownPod) {
			r.logger.Warn("speculative entries not settled", "error", err)
		}
	}
	b.h = b.h[:0]
	r.specs.Put(b)
}

func (r *Router) observe(d *Decision) {
	r.metrics.decided(d)
	level := slog.LevelInfo
	if d.Elapsed > r.cfg.Tuning.SlowDecision {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !r.logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", d.RequestID), slog.String("api", d.API.String()), slog.String("model", d.Model),
		slog.String("pod", d.Pod), slog.Int("cached_blocks", d.Matched),
		slog.Int("total_blocks", d.Total), slog.String("reason", string(d.Reason)),
		slog.Int64("decision_us", d.Elapsed.Microseconds()),
	}
	if d.PrefillPod != "" {
		attrs = append(attrs, slog.String("prefill_pod", d.PrefillPod))
	}
	if r.logger.Enabled(ctx, slog.LevelDebug) {
		attrs = append(attrs, slog.Int("prompt_tokens", d.Tokens),
			slog.Int64("tokenize_us", d.Stages.Tokenize.Microseconds()), slog.Int64("hash_us", d.Stages.Hash.Microseconds()),
			slog.Int64("match_us", d.Stages.Match.Microseconds()), slog.Int64("score_us", d.Stages.Score.Microseconds()))
	}
	r.logger.LogAttrs(ctx, level, "routed", attrs...)
}

// newDecision is the decision to route req to candidate i of sc, its
// reason from ev's and the pick (placed: a new prefix placed by KV use).
func (r *Router) newDecision(req Request, ev evaluation, sc *scratch, i int, placed bool) *Decision {
	m, sco := sc.members[i], sc.scores[i]
	d := &Decision{
		RequestID: req.ID, API: ev.api, Model: ev.model, Pod: m.Pod.Name, Address: m.Endpoint, DPRank: sco.DPRank,
		Matched: sco.Matched, Total: len(sc.hashes), Tokens: ev.tokens, Reason: ev.reason,
		Stages: ev.stages, load: m.Load, router: r, pod: m.ID, prefill: sco.work,
	}
	switch {
	case d.Reason != ReasonLoad:
	case placed:
		d.Reason = ReasonPlacement
	case d.Matched > 0:
		d.Reason = ReasonPrefix
	}
	return d
}

// record counts d on its pod, candidate i of sc: in flight, the share of the prompt the
// candidates cached (fleet.Load.Reuse), its prefill charged to the pod
// that computes it, and its blocks speculated there until its events
// confirm them.
func (r *Router) record(d *Decision, i int, sc *scratch) {
	m := sc.members[i]
	m.Load.InFlight.Add(1)
	if share := bestShare(sc.scores, len(sc.hashes)); share >= 0 {
		m.Load.FoldReuse(share, ReuseWindow)
	}
	if d.hop == nil {
		r.charge(m.Load, m.ID, d.prefill, int64(d.Tokens), 1)
	}
	if len(sc.hashes) == 0 {
		return
	}
	err := r.speculate(m.Load, m.ID, sc.hashes, sc.scores[i].Matched > sc.scores[i].Spec)
	switch {
	case err == nil:
		// The decision keeps the hashes for Prefilled; the scratch takes a
		// recycled buffer instead.
		b := r.hashBuf()
		b.h, sc.hashes = sc.hashes, b.h
		d.spec = b
	case !errors.Is(err, kvindex.ErrUnknownPod):
		r.logger.Warn("speculative entries not recorded", "pod", m.Pod.Name, "error", err)
	}
}
