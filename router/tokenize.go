package router

import (
	"errors"
	"time"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// tokenize tokenizes p's prompt (the body of a request to path) as the
// model's mode says and appends its block hashes to sc.hashes. When that
// is impossible the request is routed by load and the reason says why.
// via is how the ids were found (ModeExact, ModeRender; "" when not).
func (r *Router) tokenize(t *fleet.Target, path string, p *Parsed, sc *scratch, st *Stages) (reason Reason, tokens int, via Mode) {
	t0 := time.Now()
	ids := p.PromptTokens
	extra := blockhash.Extra{LoRA: t.LoRA, CacheSalt: p.CacheSalt}
	media := p.Chat != nil && ids == nil && p.Chat.HasMedia()
	if media {
		r.metrics.multimodal.Inc()
	}
	mm := r.modeOf(t.Base)
	if ids == nil {
		switch {
		case mm.Mode == ModeLoad:
			return ReasonTokenizationOff, 0, ""
		case mm.Mode == ModeRender, mm.Mode == ModeAuto && (mm.RenderOnly || media && mm.Render != ""):
			return r.tokenizeRendered(t, path, p, sc, st, extra, mm)
		}
	}
	var hit tokenizer.PrefixHit
	var cache *tokenizer.PrefixCache
	sc.early.reset(r.hasher, extra)
	if ids == nil {
		var err error
		if pt, ok := r.tok.(prefixTokenizers); ok {
			sc.tokens, hit, cache, err = pt.appendTokensPrefix(sc.tokens[:0], t.Base, p, sc.early.add)
		} else {
			sc.tokens, err = r.tok.AppendTokens(sc.tokens[:0], t.Base, p)
		}
		ids = sc.tokens
		st.Tokenize = time.Since(t0)
		if err != nil {
			if mm.Mode == ModeAuto && mm.Render != "" { // what kvrouter cannot reproduce, vLLM renders
				return r.tokenizeRendered(t, path, p, sc, st, extra, mm)
			}
			if reason, ok := missingReason(err); ok {
				return reason, 0, ""
			}
			r.tokenizeErrs.log(time.Now(), p.Model, err)
			return ReasonTokenizeError, 0, ""
		}
	}
	t1 := time.Now()
	if cache != nil {
		r.hashPrefix(ids, extra, hit, cache, sc)
	} else {
		sc.hashes = sc.early.appendHashes(sc.hashes, ids)
	}
	st.Hash = time.Since(t1)
	return ReasonLoad, len(ids), ModeExact
}

// tokenizeRendered finds p's ids and multimodal items on the model's
// render endpoints and hashes them. A failure is ReasonRenderFailed,
// logged and in the model's health.
func (r *Router) tokenizeRendered(t *fleet.Target, path string, p *Parsed, sc *scratch, st *Stages, extra blockhash.Extra, mm ModelMode) (Reason, int, Mode) {
	t0 := time.Now()
	items, err := r.renderTokens(mm, path, p, sc)
	st.Tokenize += time.Since(t0)
	if err != nil {
		r.tokenizeErrs.log(time.Now(), p.Model, err)
		r.modelHealth.Set(t.Base, PartRender, err)
		return ReasonRenderFailed, 0, ""
	}
	r.modelHealth.Set(t.Base, PartRender, nil)
	extra.MM = items
	t1 := time.Now()
	sc.hashes = r.hasher.AppendHashes(sc.hashes, sc.tokens, extra)
	st.Hash = time.Since(t1)
	return ReasonLoad, len(sc.tokens), ModeRender
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
