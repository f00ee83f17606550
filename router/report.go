package router

import "strconv"

// Report is what POST /v1/score answers: how every candidate would score,
// without routing.
type Report struct {
	Model  string `json:"model"`
	Reason Reason `json:"reason"`
	// Tokenization is how the prompt's ids were found: exact (kvrouter's
	// tokenizer) or render (the model's render endpoint); "" when not.
	Tokenization Mode     `json:"tokenization,omitempty"`
	Tokens       int      `json:"prompt_tokens"`
	Blocks       []string `json:"block_hashes"` // decimal, as vLLM's events print them
	KVPressure   float64  `json:"kv_pressure"`  // prefills an uncached token costs for the fleet's KV use (Tuning.KVPressure)
	Reuse        float64  `json:"reuse_weight"` // prefills it costs more for the cached block it evicts (Tuning.ReuseWeight)
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
	rep := &Report{Model: ev.model, Reason: ev.reason, Tokenization: ev.via, Tokens: ev.tokens, KVPressure: ev.pressure, Reuse: ev.reuse, Pods: sc.scores, Stages: ev.stages}
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
