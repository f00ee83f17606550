package router

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/internal/tracing"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrNoTokenizer is what Tokenizers returns for a model it has no tokenizer
// for; the router then routes by load alone.
var ErrNoTokenizer = errors.New("router: no tokenizer for the model")

// Tokenizers gives the token ids vLLM computes for a request's prompt.
type Tokenizers interface {
	// AppendTokens appends the ids of p's prompt under base model's
	// tokenizer and chat template to dst and returns the extended slice,
	// or an error wrapping ErrNoTokenizer. The router reuses dst's memory
	// for later requests; nothing may keep it.
	AppendTokens(dst []uint32, base string, p *Parsed) ([]uint32, error)
}

// Request is what the router reads of an HTTP request.
type Request struct {
	ID     string  // x-request-id, for logs
	Path   string  // :path
	Body   []byte  // the whole body
	Subset *Subset // the endpoints the request may go to (a subset hint); nil: any
	// Objective is the x-gateway-inference-objective header: the
	// InferenceObjective whose priority says whether the request may be shed.
	Objective string
}

// Reason says why a pod was picked; SREs see it in x-kvrouter-reason.
type Reason string

// The reasons of a decision.
const (
	ReasonPrefix Reason = "prefix" // a cached prefix made the chosen pod cheapest
	ReasonLoad   Reason = "load"   // the chosen pod caches none of the prompt: picked by cost, its load deciding
	// ReasonPlacement: a prompt the cheapest pod lacks more than half of
	// places a new prefix on the least used KV cache among the pods near
	// the cheapest (Tuning.PlacementTolerance).
	ReasonPlacement   Reason = "placement"
	ReasonNoTokenizer Reason = "no-tokenizer" // the model has no tokenizer: picked by load
	// ReasonTokenizerPending: the model's tokenizer is being downloaded:
	// picked by load.
	ReasonTokenizerPending Reason = "tokenizer-pending"
	// ReasonNoChatTemplate: a chat request for a model without a chat
	// template: picked by load.
	ReasonNoChatTemplate Reason = "no-chat-template"
	ReasonTokenizeError  Reason = "tokenize-error" // the prompt could not be tokenized: picked by load
	ReasonOtherPath      Reason = "other-path"     // not a request the router tokenizes: picked by load
	ReasonTooLong        Reason = "too-long"       // a body over MaxTokenizeBytes, not tokenized: picked by load
	// ReasonRenderFailed: the model's render endpoint failed (timeout,
	// error, every endpoint's breaker open, too many calls in flight):
	// picked by load.
	ReasonRenderFailed Reason = "render-failed"
	// ReasonTokenizationOff: the model's tokenization mode is load.
	ReasonTokenizationOff Reason = "tokenization-off"
	// ReasonResponse: a request continuing, reading or canceling a
	// Responses API response: sent to the pod that produced it.
	ReasonResponse Reason = "response"
)

// Reasons are every Reason, in the order above.
var Reasons = []Reason{
	ReasonPrefix, ReasonLoad, ReasonPlacement, ReasonNoTokenizer, ReasonTokenizerPending, ReasonNoChatTemplate,
	ReasonTokenizeError, ReasonOtherPath, ReasonTooLong, ReasonResponse, ReasonRenderFailed, ReasonTokenizationOff,
}

// Index is the part of the block index the router reads and writes: a
// *kvindex.Index (the memory backend) or a *redisindex.Index (shared by
// replicas through Redis).
type Index interface {
	// Match reports, per candidate, the leading blocks of hashes it holds;
	// see kvindex.Index.Match.
	Match(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch) []kvindex.PodMatch
	// Speculate records a decision's blocks on its pod until confirmed.
	Speculate(pod kvindex.PodID, hashes []uint64) error
	// Settle shortens a decision's speculative entries to the grace period.
	Settle(pod kvindex.PodID, hashes []uint64) error
}

// LoadSharer is an Index shared by router replicas that also shares their
// in-flight prefill (a *redisindex.Index): each replica charges its
// decisions' prefill there, and a match reports the other replicas' on
// each candidate, which the score adds to the replica's own.
type LoadSharer interface {
	// MatchLoad is Match that also fills peers, by candidate, with the
	// prefill the other replicas routed there and that is not done yet.
	MatchLoad(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch, peers []replica.PodLoad) ([]kvindex.PodMatch, []replica.PodLoad)
	// Charge adds to the prefill this replica routed to pod, not done yet.
	Charge(pod kvindex.PodID, tokens, requests int64)
}

// speculationLives is an Index that says how long a speculative entry
// lives unconfirmed and unsettled (kvindex.Config.SpeculativeTTL) and
// once settled (SpeculativeGrace). The router records the speculation of
// a block that decisions keep in flight again every quarter of the first,
// or half of the second if shorter: before another replica's settling of
// the shared entry runs out while decisions keep coming. Without it, on
// every decision.
type speculationLives interface {
	SpeculativeTTL() time.Duration
	SpeculativeGrace() time.Duration
}

// Router turns requests into routing decisions.
type Router struct {
	cfg     Config
	fleet   *fleet.Fleet
	index   Index
	sharer  LoadSharer    // index, when it shares the replicas' in-flight prefill; nil otherwise
	refresh time.Duration // how often a block's speculation is recorded again while decisions keep it in flight
	hasher  *blockhash.Hasher
	tok     Tokenizers
	logger  *slog.Logger
	metrics *metrics
	scratch sync.Pool // *scratch
	specs   sync.Pool // *hashBuf
	// refusals logs refused requests.
	refusals *refusalLog
	// tokenizeErrs logs prompts that could not be tokenized.
	tokenizeErrs *tokenizeLog
	// objectives are the InferenceObjectives' priorities, swapped whole.
	objectives atomic.Pointer[Objectives]
	// queue is kvrouter's queue (queue.go).
	queue requestQueue
	// homes are the prefixes' home pods (homes.go); nil when off.
	homes *homeTable
	// responses are the Responses API ids learned (responseids.go); nil
	// when off.
	responses *responseIDs
	// renderer calls the models' render endpoints (modes.go).
	renderer *renderer
	// modelHealth is the models' health the tokenizers keep (their
	// render endpoints' too); nil: none kept.
	modelHealth *Health
}

// New returns a router over fleet (whose pods are registered in index),
// hashing with hasher and tokenizing with tok. reg receives its metrics.
func New(cfg Config, fleet *fleet.Fleet, index Index, hasher *blockhash.Hasher, tok Tokenizers, logger *slog.Logger, reg prometheus.Registerer) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	if pt, ok := tok.(prefixTokenizers); ok {
		if _, on := pt.prefixStats(); on {
			if err := register(reg, prefixCollector{pt}); err != nil {
				return nil, err
			}
		}
	}
	r := &Router{cfg: cfg, fleet: fleet, index: index, hasher: hasher, tok: tok, logger: logger, metrics: m, refusals: &refusalLog{logger: logger}, tokenizeErrs: newTokenizeLog(logger)}
	r.sharer, _ = index.(LoadSharer)
	if l, ok := index.(speculationLives); ok {
		r.refresh = min(l.SpeculativeTTL()/4, l.SpeculativeGrace()/2)
	}
	if err := register(reg, podCollector{r}); err != nil {
		return nil, err
	}
	if cfg.ResponseIDs > 0 {
		r.responses = newResponseIDs(cfg.ResponseIDs)
	}
	if r.renderer, err = newRenderer(cfg.Render, reg); err != nil {
		return nil, err
	}
	if rt, ok := tok.(RegistryTokenizers); ok {
		r.modelHealth = rt.Health
	}
	if cfg.Homes {
		if r.homes, err = newHomeTable(reg, r.now); err != nil {
			return nil, err
		}
		switch x := index.(type) {
		case *kvindex.Index:
			r.homes.caches = x.Holds
		case localViewer:
			r.homes.caches = x.Local().Holds
		}
	}
	return r, nil
}

// localViewer is an Index that keeps, beside what it shares, a memory
// view of the events of every pod (a *redisindex.Index; empty when its
// local view is off, and idle prefixes then leave): what homes ask of it
// must not wait on a round trip under their lock.
type localViewer interface {
	Local() *kvindex.Index
}

// scratch is per-request working memory.
type scratch struct {
	tokens  []uint32 // the prompt's ids while it is hashed
	hashes  []uint64
	digests []blockhash.Digest // the new blocks' digests, with a prefix cache
	early   earlyHash          // blocks hashed while the prompt was still being encoded
	ids     []kvindex.PodID
	members []*fleet.Member
	matches []kvindex.PodMatch
	peers   []replica.PodLoad // by member: the other replicas' prefill there, with a LoadSharer
	scores  []Score
}

// Route picks the pod for req and records it: the pod's load and
// speculative index entries for the prompt's blocks. A request the router
// refuses gives an *Error. While the router holds requests (queue.go) it
// waits until a pod has room, ctx is done (its error is returned) or
// Config.QueueMaxWait has passed.
//
// A request for a model with no ready pod waits for one first, up to
// Config.ScaleFromZeroWait (capacity.go).
//
// With tracing on (ctx carrying the caller's span, if any), the request's
// span is a child of it (trace.go).
func (r *Router) Route(ctx context.Context, req Request) (*Decision, error) {
	if !tracing.On() {
		return r.route(ctx, req, nil)
	}
	parent := trace.SpanContextFromContext(ctx)
	ctx, span := startRoute(ctx)
	d, err := r.route(ctx, req, span)
	endRoute(ctx, parent, span, req, d, err)
	return d, err
}

// route is Route; span is the request's, nil with tracing off.
func (r *Router) route(ctx context.Context, req Request, span trace.Span) (*Decision, error) {
	d, t, err := r.begin(req, true)
	if w, ok := err.(capacityWait); ok { //nolint:errorlint // begin returns it unwrapped; errors.As would allocate
		end := stage(ctx, span, "kvrouter.capacity_wait")
		ok := r.awaitCapacity(ctx, w.model, req.Subset)
		end()
		if !ok && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d, t, err = r.begin(req, false)
	}
	if t == nil {
		return d, err
	}
	end := stage(ctx, span, "kvrouter.queue_wait")
	defer end()
	return t.wait(ctx)
}

// Begin is Route without the waits: it gives the decision, or the Ticket of
// a request the router holds (Ticket.Ready, Ticket.Finish), or the error.
func (r *Router) Begin(req Request) (*Decision, *Ticket, error) {
	return r.begin(req, false)
}

// capacityWait is begin's answer for a request that is to wait for a
// ready pod of its model before it is routed or refused.
type capacityWait struct{ model string }

func (capacityWait) Error() string { return "router: waiting for a ready pod" }

// begin is Begin; with mayWait, a request that waitsForCapacity gets a
// capacityWait instead of its refusal.
func (r *Router) begin(req Request, mayWait bool) (*Decision, *Ticket, error) {
	start := time.Now()
	sc, _ := r.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	ev, err := r.evaluate(req, sc)
	if err != nil {
		r.putScratch(sc)
		if mayWait && r.waitsForCapacity(AsError(err), ev.model) {
			return nil, nil, capacityWait{ev.model}
		}
		r.refuse(req, ev.model, err)
		return nil, nil, err
	}
	if t := r.enqueue(req, ev, sc, start); t != nil {
		return nil, t, nil
	}
	defer r.putScratch(sc)
	return r.decide(req, ev, sc, nil, start), nil, nil
}

// refuse counts and logs req, for model, refused with err.
func (r *Router) refuse(req Request, model string, err error) {
	if e := AsError(err); e != nil {
		r.Refused(req.ID, req.Path, model, e)
		return
	}
	r.metrics.refused(err) // internal: counted, logged by the caller
}

// decide picks the pod for req among the scored candidates in sc that ok
// allows (nil: all) and records the decision: the pipeline after the
// costs, as docs/routing.md states it. start is when the router began the
// request.
func (r *Router) decide(req Request, ev evaluation, sc *scratch, ok func(int) bool, start time.Time) *Decision {
	pd := disaggregated(sc.members)
	allowed := destinations(sc, pd, ok)
	i, placed := r.pickPod(ev, sc, pd, allowed)
	d := r.newDecision(req, ev, sc, i, placed)
	d.started = start
	if pd {
		r.addPrefillHop(d, i, sc) // pd.go
	}
	if r.cfg.DestinationEndpoints > 1 {
		r.fallbacks(d, i, sc) // fallback.go
	}
	r.record(d, i, sc)
	d.Elapsed = time.Since(start)
	r.observe(d)
	return d
}

// destinations is which candidates may be the destination: with prefill
// and decode pods mixed, those that decode; and those ok allows (nil:
// all). Nil allows every candidate.
func destinations(sc *scratch, pd bool, ok func(int) bool) func(int) bool {
	var dest func(int) bool
	if pd {
		dest = isDestination(sc)
	}
	switch {
	case ok == nil:
		return dest
	case dest == nil:
		return ok
	}
	return func(i int) bool { return dest(i) && ok(i) }
}

// pickPod picks among the allowed candidates: through the prompt's home
// (homes.go) when homes are on and the prompt was hashed, a P/D fleet
// aside; otherwise the cheapest within the tolerance, or for a new prefix
// the least used KV cache within the placement window (choose.go). placed
// reports the latter.
func (r *Router) pickPod(ev evaluation, sc *scratch, pd bool, allowed func(int) bool) (i int, placed bool) {
	if ev.pinned > 0 { // only that pod holds the response the request names
		return ev.pinned - 1, false
	}
	if r.homes != nil && !pd && len(sc.hashes) > 0 {
		return r.routeHome(homeRequest{
			ns: ev.ns, hashes: sc.hashes, bs: r.hasher.BlockSize(), scores: sc.scores, members: sc.members,
			ok: allowed, tokens: ev.tokens, share: ev.share, now: r.now().UnixNano(),
		})
	}
	return r.choose(sc.scores, allowed, ev.tokens, ev.share)
}

// now is Config.Now, or time.Now.
func (r *Router) now() time.Time {
	if r.cfg.Now != nil {
		return r.cfg.Now()
	}
	return time.Now()
}

// maxKeptTokens bounds the token buffer a pooled scratch keeps (1 MiB):
// an exceptional prompt's buffer is left to the collector.
const maxKeptTokens = 1 << 18

func (r *Router) putScratch(sc *scratch) {
	if cap(sc.tokens) > maxKeptTokens {
		sc.tokens = nil
	}
	r.scratch.Put(sc)
}
