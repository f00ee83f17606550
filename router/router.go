package router

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
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
	ReasonLoad   Reason = "load"   // nothing cached anywhere useful: picked by load
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
	ReasonOtherPath      Reason = "other-path"     // not a completion or chat request: picked by load
	ReasonTooLong        Reason = "too-long"       // a body over MaxTokenizeBytes, not tokenized: picked by load
)

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
	MatchLoad(namespace string, hashes []uint64, candidates []kvindex.PodID, out []kvindex.PodMatch, peers []kvindex.PodLoad) ([]kvindex.PodMatch, []kvindex.PodLoad)
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
	if err := register(reg, speedCollector{r}); err != nil {
		return nil, err
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

// Decision is where one request goes. Call Prefilled when the pod's first
// response byte arrives and Done when the request ends.
type Decision struct {
	RequestID string
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

// scratch is per-request working memory.
type scratch struct {
	tokens  []uint32 // the prompt's ids while it is hashed
	hashes  []uint64
	digests []blockhash.Digest // the new blocks' digests, with a prefix cache
	ids     []kvindex.PodID
	members []*fleet.Member
	matches []kvindex.PodMatch
	peers   []kvindex.PodLoad // by member: the other replicas' prefill there, with a LoadSharer
	scores  []Score
}

// Route picks the pod for req and records it: the pod's load and
// speculative index entries for the prompt's blocks. A request the router
// refuses gives an *Error. While the router holds requests (queue.go) it
// waits until a pod has room, ctx is done (its error is returned) or
// Config.QueueMaxWait has passed.
func (r *Router) Route(ctx context.Context, req Request) (*Decision, error) {
	d, t, err := r.Begin(req)
	if t == nil {
		return d, err
	}
	return t.wait(ctx)
}

// Begin is Route without the wait: it gives the decision, or the Ticket of
// a request the router holds (Ticket.Ready, Ticket.Finish), or the error.
func (r *Router) Begin(req Request) (*Decision, *Ticket, error) {
	start := time.Now()
	sc, _ := r.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	ev, err := r.evaluate(req, sc)
	if err != nil {
		r.putScratch(sc)
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
	r.metrics.refused(err)
	if e := AsError(err); e != nil {
		r.Refused(req.ID, req.Path, model, e)
	}
}

// decide picks the pod for req among the scored candidates in sc that ok
// allows (nil: all) and records the decision. start is when the router
// began the request.
func (r *Router) decide(req Request, ev evaluation, sc *scratch, ok func(int) bool, start time.Time) *Decision {
	var dest func(int) bool
	pd := disaggregated(sc.members)
	if pd {
		dest = isDestination(sc)
	}
	if ok != nil {
		if dest != nil {
			d := dest
			dest = func(i int) bool { return d(i) && ok(i) }
		} else {
			dest = ok
		}
	}
	var i int
	var placed bool
	if r.homes != nil && !pd && len(sc.hashes) > 0 {
		i, placed = r.routeHome(ev.ns, sc.hashes, r.hasher.BlockSize(), sc.scores, sc.members, dest, ev.tokens, ev.share, r.now().UnixNano())
	} else {
		i, placed = r.choose(sc.scores, dest, ev.tokens, ev.share)
	}
	m := sc.members[i]
	d := &Decision{
		RequestID: req.ID, Model: ev.model, Pod: m.Pod.Name, Address: m.Endpoint, DPRank: sc.scores[i].DPRank,
		Matched: sc.scores[i].Matched, Total: len(sc.hashes), Tokens: ev.tokens, Reason: ev.reason,
		Stages: ev.stages, load: m.Load, router: r, pod: m.ID,
	}
	switch {
	case d.Reason != ReasonLoad:
	case placed:
		d.Reason = ReasonPlacement
	case d.Matched > 0:
		d.Reason = ReasonPrefix
	}
	d.prefill = sc.scores[i].work
	if pd {
		r.addPrefillHop(d, i, sc)
	}
	if r.cfg.DestinationEndpoints > 1 {
		r.fallbacks(d, i, sc)
	}
	m.Load.InFlight.Add(1)
	if share := bestShare(sc.scores, len(sc.hashes)); share >= 0 {
		m.Load.FoldReuse(share, ReuseWindow)
	}
	if d.hop == nil {
		r.charge(m.Load, m.ID, d.prefill, int64(d.Tokens), 1)
	}
	if len(sc.hashes) > 0 {
		err := r.speculate(m.Load, m.ID, sc.hashes, sc.scores[i].Matched > sc.scores[i].Spec)
		switch {
		case err == nil:
			// The decision keeps the hashes for Prefilled; the scratch
			// takes a recycled buffer instead.
			b := r.hashBuf()
			b.h, sc.hashes = sc.hashes, b.h
			d.spec = b
		case !errors.Is(err, kvindex.ErrUnknownPod):
			r.logger.Warn("speculative entries not recorded", "pod", m.Pod.Name, "error", err)
		}
	}
	d.Elapsed = time.Since(start)
	r.observe(d)
	return d
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
		slog.String("request_id", d.RequestID), slog.String("model", d.Model),
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

// fallbacks names the next best candidates after the pick (index pick), by
// cost, up to Config.DestinationEndpoints in all. The request keeps the pick's
// X-data-parallel-rank (or its absence) wherever it goes, so a candidate
// qualifies only where that header sends it to the candidate itself: the
// same rank on another server, or, for rank 0, a server of one rank (and
// no rank of a server of several for a pick that names none: that server's
// balancer would choose).
func (r *Router) fallbacks(d *Decision, pick int, sc *scratch) {
	order := make([]int, 0, len(sc.scores)-1)
	dest := sc.members[pick].Pod.Role != pod.RolePrefill // a prefill pod is no fallback for a destination
	for j := range sc.scores {
		if rank := sc.scores[j].DPRank; j != pick && (rank == d.DPRank || d.DPRank == 0 && rank < 0) &&
			(!dest || sc.members[j].Pod.Role != pod.RolePrefill) {
			order = append(order, j)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sc.scores[a].Cost, sc.scores[b].Cost) })
	if n := r.cfg.DestinationEndpoints - 1; len(order) > n {
		order = order[:n]
	}
	d.Fallbacks = make([]string, len(order))
	d.alts = make([]alternate, len(order))
	for k, j := range order {
		d.Fallbacks[k] = sc.members[j].Endpoint
		d.alts[k] = alternate{member: sc.members[j], matched: sc.scores[j].Matched, work: sc.scores[j].work}
	}
}
