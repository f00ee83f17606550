package router

import (
	"errors"
	"time"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// tokenize tokenizes p's prompt and appends its block hashes to sc.hashes. When
// that is impossible the request is routed by load and the reason says why.
func (r *Router) tokenize(t *fleet.Target, p *Parsed, sc *scratch, st *Stages) (Reason, int) {
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
