package router

import (
	"time"
)

// evaluation is what evaluate learned of a request besides the scores.
type evaluation struct {
	api      Kind
	model    string
	ns       string // the index namespace: the target's base model; "" for any pod
	tokens   int
	reason   Reason
	via      Mode    // how the prompt's ids were found; "" when they were not
	pinned   int     // 1 + the candidate holding the response the request names (ReasonResponse); 0: none (Router.pin)
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
	ev := evaluation{api: kind}
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
	if id := responseIDOf(kind, p, req.Path); id != "" {
		if ev.pinned = r.pin(snap, t, id, req.Subset, sc); ev.pinned < 0 {
			return ev, responseGone(id)
		}
		if ev.pinned > 0 {
			ev.reason = ReasonResponse
		}
	}
	ev.stages.Parse = time.Since(t0)
	switch {
	case ev.pinned > 0: // its prompt holds what only that pod stored
	case p == nil:
	case r.cfg.MaxTokenizeBytes > 0 && len(req.Body) > r.cfg.MaxTokenizeBytes && p.PromptTokens == nil:
		ev.reason = ReasonTooLong
	default:
		ev.reason, ev.tokens, ev.via = r.tokenize(t, req.Path, p, sc, &ev.stages)
	}
	if t != nil {
		ev.ns = t.Base
	}
	r.match(&ev, sc)
	r.cost(&ev, sc)
	return ev, nil
}

// match matches sc.hashes over the candidates in sc.members into
// sc.matches (and the other replicas' prefill in flight into sc.peers).
func (r *Router) match(ev *evaluation, sc *scratch) {
	t := time.Now()
	sc.ids = sc.ids[:0]
	for _, m := range sc.members {
		sc.ids = append(sc.ids, m.ID)
	}
	if r.sharer != nil {
		sc.matches, sc.peers = r.sharer.MatchLoad(ev.ns, sc.hashes, sc.ids, sc.matches, sc.peers)
	} else {
		sc.matches, sc.peers = r.index.Match(ev.ns, sc.hashes, sc.ids, sc.matches), sc.peers[:0]
	}
	ev.stages.Match = time.Since(t)
}

// cost prices the matched candidates into sc.scores: the fleet's weights
// into ev, then each candidate's cost (costs).
func (r *Router) cost(ev *evaluation, sc *scratch) {
	t := time.Now()
	ev.pressure, ev.reuse, ev.share = r.weights(sc.members)
	sc.scores = r.costs(sc.matches, sc.peers, sc.members, sc.hashes, ev.tokens, ev.pressure+ev.reuse, r.now().UnixNano(), sc.scores)
	ev.stages.Score = time.Since(t)
}
