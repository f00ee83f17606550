package router

import (
	"errors"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// evaluation is what evaluate learned of a request besides the scores.
type evaluation struct {
	model    string
	ns       string // the index namespace: the target's base model; "" for any pod
	tokens   int
	reason   Reason
	pressure float64 // the candidates' KV pressure
	reuse    float64 // the candidates' eviction weight (Router.weights)
	share    float64 // the candidates' mean share of a prompt found cached lately (Router.weights)
	stages   Stages
}

// Stages is how long each step of a decision took.
type Stages struct {
	Parse    time.Duration `json:"parse"`    // body → fields, candidates
	Tokenize time.Duration `json:"tokenize"` // prompt → token ids (chat: render too)
	Hash     time.Duration `json:"hash"`     // token ids → block hashes
	Match    time.Duration `json:"match"`    // index lookup over the candidates
	Score    time.Duration `json:"score"`    // predicted cost per candidate
}

// evaluate parses req, resolves its candidates and scores each into
// sc.members and sc.scores (same order), with the prompt's block hashes in
// sc.hashes. It records nothing.
func (r *Router) evaluate(req Request, sc *scratch) (evaluation, error) {
	sc.hashes, sc.members = sc.hashes[:0], sc.members[:0]
	t0 := time.Now()
	snap := r.fleet.Snapshot()
	kind := KindOf(req.Path)
	var ev evaluation
	var p *Parsed
	if kind == KindOther {
		ev.reason = ReasonOtherPath
		ev.model = modelOf(req.Body)
	} else {
		var err error
		if p, err = Parse(kind, req.Body); err != nil {
			return ev, err
		}
		ev.model = p.Model
	}
	// A request naming a model goes only to that model's pods; one naming
	// none (GET /v1/models, say) to any.
	t, err := r.resolve(snap, ev.model, ev.model != "" || kind != KindOther, req.Subset, t0, sc)
	if err != nil {
		return ev, err
	}
	if e := r.shed(req, ev.model, sc.members, t0); e != nil {
		return ev, e
	}
	ev.stages.Parse = time.Since(t0)
	switch {
	case p == nil:
	case r.cfg.MaxTokenizeBytes > 0 && len(req.Body) > r.cfg.MaxTokenizeBytes && p.PromptTokens == nil:
		ev.reason = ReasonTooLong
	default:
		ev.reason, ev.tokens = r.hash(t, p, sc, &ev.stages)
	}
	if t != nil {
		ev.ns = t.Base
	}
	r.match(&ev, sc)
	return ev, nil
}

// match matches sc.hashes over the candidates in sc.members and scores
// them into sc.scores, with ev's weights and stages.
func (r *Router) match(ev *evaluation, sc *scratch) {
	t1 := time.Now()
	sc.ids = sc.ids[:0]
	for _, m := range sc.members {
		sc.ids = append(sc.ids, m.ID)
	}
	if r.sharer != nil {
		sc.matches, sc.peers = r.sharer.MatchLoad(ev.ns, sc.hashes, sc.ids, sc.matches, sc.peers)
	} else {
		sc.matches, sc.peers = r.index.Match(ev.ns, sc.hashes, sc.ids, sc.matches), sc.peers[:0]
	}
	t2 := time.Now()
	ev.pressure, ev.reuse, ev.share = r.weights(sc.members)
	sc.scores = r.score(sc.matches, sc.peers, sc.members, sc.hashes, ev.tokens, ev.pressure+ev.reuse, r.now().UnixNano(), sc.scores)
	ev.stages.Match, ev.stages.Score = t2.Sub(t1), time.Since(t2)
}

// resolve fills sc.members with the candidates of a request for model in
// snap: only the model's pods when named, else any pod. It returns the
// model's target (nil when not named), or why no pod can serve it.
func (r *Router) resolve(snap *fleet.Snapshot, model string, named bool, subset *Subset, now time.Time, sc *scratch) (*fleet.Target, error) {
	var t *fleet.Target
	if named {
		if t = snap.Target(model); t == nil {
			if r.fleet.Known(model) {
				return nil, unavailable("no ready pod serves model %q: its pods are gone", model)
			}
			return nil, notFound("model %q is served by no pod", model)
		}
	}
	r.candidates(snap, t, subset, now, sc)
	if len(sc.members) == 0 {
		if model == "" {
			return t, unavailable("no ready pod to route to")
		}
		return t, unavailable("no ready pod serves model %q", model)
	}
	return t, nil
}

// candidates fills sc.members with the ready pods of t (every ready pod when
// t is nil) allowed by the subset hint, less the blind ones while any other
// remains (dropBlind).
func (r *Router) candidates(snap *fleet.Snapshot, t *fleet.Target, subset *Subset, now time.Time, sc *scratch) {
	consider := func(m *fleet.Member) {
		if m.Pod.Ready && subset.Allows(m.Endpoint) {
			sc.members = append(sc.members, m)
		}
	}
	if t != nil {
		for _, m := range t.Members {
			consider(m)
		}
	} else {
		for _, m := range snap.Members() {
			consider(m)
		}
	}
	if r.fleet.Scraped() {
		sc.members = r.dropBlind(sc.members, now)
	}
}

// dropBlind removes the blind members (fleet.Metrics.Blind) when at least
// one is not blind, and returns members unchanged otherwise.
//
// A blind pod is not scored with the figures it has: they read zero, or
// the queue of a while ago, so it would look idle and draw traffic to a pod
// kvrouter cannot see, likely one overloaded or half dead. Nor is it
// penalized by a made-up queue: there is no figure to price, and any price
// either still draws traffic or never does. So it is left out while a pod
// with fresh figures can serve the request. When every candidate is blind
// (the metrics port is down fleet-wide, or a network policy blocks it) they
// are scored as they are: requests still route, and kvrouter's own
// in-flight and prefill counts still spread them.
func (r *Router) dropBlind(members []*fleet.Member, now time.Time) []*fleet.Member {
	kept := members[:0] // writes only over members already read
	for _, m := range members {
		if !m.Load.Metrics(now, r.cfg.StaleMetricsAfter).Blind() {
			kept = append(kept, m)
		}
	}
	if len(kept) == 0 { // nothing was written: members is intact
		return members
	}
	return kept
}

// hash tokenizes p's prompt and appends its block hashes to sc.hashes. When
// that is impossible the request is routed by load and the reason says why.
func (r *Router) hash(t *fleet.Target, p *Parsed, sc *scratch, st *Stages) (Reason, int) {
	t0 := time.Now()
	tokens := p.PromptTokens
	extra := blockhash.Extra{LoRA: t.LoRA, CacheSalt: p.CacheSalt}
	if p.Chat != nil && tokens == nil && p.Chat.HasMedia() {
		r.metrics.multimodal.Inc()
	}
	var hit tokenizer.PrefixHit
	var cache *tokenizer.PrefixCache
	if tokens == nil {
		var err error
		if pt, ok := r.tok.(prefixTokenizers); ok {
			sc.tokens, hit, cache, err = pt.appendTokensPrefix(sc.tokens[:0], t.Base, p)
		} else {
			sc.tokens, err = r.tok.AppendTokens(sc.tokens[:0], t.Base, p)
		}
		tokens = sc.tokens
		st.Tokenize = time.Since(t0)
		if err != nil {
			if reason, ok := missingReason(err); ok {
				return reason, 0
			}
			r.tokenizeErrs.log(time.Now(), p.Model, err)
			return ReasonTokenizeError, 0
		}
	}
	t1 := time.Now()
	if cache != nil {
		r.hashPrefix(tokens, extra, hit, cache, sc)
	} else {
		sc.hashes = r.hasher.AppendHashes(sc.hashes, tokens, extra)
	}
	st.Hash = time.Since(t1)
	return ReasonLoad, len(tokens)
}

// missingReason is the reason of a decision whose prompt could not be
// tokenized for want of a part of its model: its tokenizer (missing or
// still downloading) or its chat template. ok is false for other errors.
func missingReason(err error) (Reason, bool) {
	switch {
	case errors.Is(err, tokenizer.ErrPending):
		return ReasonTokenizerPending, true
	case errors.Is(err, ErrNoTokenizer):
		return ReasonNoTokenizer, true
	case chatMissing(err):
		return ReasonNoChatTemplate, true
	}
	return "", false
}

// modelOf reads the model field of a body it does not otherwise parse,
// with the same lexer as Parse; "" when there is none.
func modelOf(body []byte) string {
	var model string
	lx := jsonlex.New(body, jsonlex.Options{})
	_ = lx.Object(func(key []byte) error { // an invalid body has no model
		if string(key) == "model" && lx.Peek() == jsonlex.String {
			model, _ = lx.Str()
			return nil
		}
		return lx.Skip()
	})
	return model
}

// Report is what POST /v1/score answers: how every candidate would score,
// without routing.
type Report struct {
	Model      string   `json:"model"`
	Reason     Reason   `json:"reason"`
	Tokens     int      `json:"prompt_tokens"`
	Blocks     []string `json:"block_hashes"` // decimal, as vLLM's events print them
	KVPressure float64  `json:"kv_pressure"`  // prefills an uncached token costs for the fleet's KV use (Tuning.KVPressure)
	Reuse      float64  `json:"reuse_weight"` // prefills it costs more for the cached block it evicts (Tuning.ReuseWeight)
	// Placement is the widened tolerance a request that places a new
	// prefix is picked within (Tuning.PlacementTolerance × the share of
	// prompts found cached lately); 0 when the cheapest pod caches half of
	// the prompt or more, or placement is off.
	Placement float64 `json:"placement_tolerance"`
	// Home is the prompt's prefix's entry among the homes (homes.go); nil
	// while it has none (homes off, or the prefix not seen).
	Home   *HomeReport `json:"home,omitempty"`
	Pods   []Score     `json:"pods"`
	Stages Stages      `json:"stage_ns"`
}

// Score evaluates req against every candidate pod and reports the scores,
// recording nothing.
func (r *Router) Score(req Request) (*Report, error) {
	sc := &scratch{}
	ev, err := r.evaluate(req, sc)
	if err != nil {
		return nil, err
	}
	rep := &Report{Model: ev.model, Reason: ev.reason, Tokens: ev.tokens, KVPressure: ev.pressure, Reuse: ev.reuse, Pods: sc.scores, Stages: ev.stages}
	if len(sc.scores) > 0 {
		rep.Placement = r.placement(sc.scores[cheapest(sc.scores, nil)], ev.tokens, ev.share, len(sc.scores))
	}
	if r.homes != nil && len(sc.hashes) > 0 {
		rep.Home = r.homeReport(ev.ns, sc.hashes[0], sc.members)
	}
	rep.Blocks = make([]string, len(sc.hashes))
	for i, h := range sc.hashes {
		rep.Blocks[i] = strconv.FormatUint(h, 10)
	}
	return rep, nil
}
