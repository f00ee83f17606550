package fleet

import (
	"math"
	"time"
)

// Counters are the cumulative prefill figures of a pod's vLLM metrics
// (an engine's, for a data-parallel rank), from which SpeedEstimator
// learns how fast the pod prefills. Has says which were in the scrape.
type Counters struct {
	PromptTokens   float64 // vllm:prompt_tokens_total
	CacheQueries   float64 // vllm:prefix_cache_queries_total, in tokens
	CacheHits      float64 // vllm:prefix_cache_hits_total, in tokens
	PrefillSeconds float64 // vllm:request_prefill_time_seconds_sum: scheduled to first token
	Prefills       float64 // vllm:request_prefill_time_seconds_count
	Has            Has
}

// Has is a set of Counters' figures.
type Has uint8

// The figures of Counters.
const (
	HasPromptTokens Has = 1 << iota
	HasCacheQueries
	HasCacheHits
	HasPrefillSeconds
	HasPrefills
)

// add adds o's figures to c's.
func (c Counters) add(o Counters) Counters {
	c.PromptTokens += o.PromptTokens
	c.CacheQueries += o.CacheQueries
	c.CacheHits += o.CacheHits
	c.PrefillSeconds += o.PrefillSeconds
	c.Prefills += o.Prefills
	c.Has |= o.Has
	return c
}

// addSeries adds v, a series' value, to the figure h.
func (c *Counters) addSeries(h Has, v float64) {
	switch h {
	case HasPromptTokens:
		c.PromptTokens += v
	case HasCacheQueries:
		c.CacheQueries += v
	case HasCacheHits:
		c.CacheHits += v
	case HasPrefillSeconds:
		c.PrefillSeconds += v
	case HasPrefills:
		c.Prefills += v
	}
	c.Has |= h
}

// counterSeries maps the vLLM series SpeedEstimator reads to their figure.
var counterSeries = map[string]Has{
	"vllm:prompt_tokens_total":                HasPromptTokens,
	"vllm:prefix_cache_queries_total":         HasCacheQueries,
	"vllm:prefix_cache_hits_total":            HasCacheHits,
	"vllm:request_prefill_time_seconds_sum":   HasPrefillSeconds,
	"vllm:request_prefill_time_seconds_count": HasPrefills,
}

// Speed is what a pod's metrics taught of its prefill speed: decayed sums
// over the windows SpeedEstimator closed. It is never modified.
type Speed struct {
	// Busy is the seconds the pod spent prefilling.
	Busy float64
	// Tokens is the prompt tokens it computed (not cached) meanwhile.
	Tokens float64
	// Context is Σ tokens × the mean context they were computed at: with
	// the attention surcharge a, the prefill work was Tokens + a × Context
	// tokens at no context, as the router prices it.
	Context float64
}

// PriorSeconds is how much evidence the configured prefill speed is worth
// against what a pod's metrics show: as much as this many seconds of the
// pod's prefill.
const PriorSeconds = 2.0

// SecondsPerToken is the pod's prefill cost of one token at no context:
// the prior (seconds per token) weighed as PriorSeconds of prefill at that
// cost, pooled with what was learned, the work priced with the attention
// surcharge attention.
func (s *Speed) SecondsPerToken(prior, attention float64) float64 {
	if s == nil || !(prior > 0) {
		return prior
	}
	return (PriorSeconds + s.Busy) / (PriorSeconds/prior + s.Tokens + attention*s.Context)
}

// SpeedWindow is the shortest span of scrapes SpeedEstimator reads as one
// observation: long beside a prefill, so that the prefills a window counts
// (at their first token) mostly ran in it.
const SpeedWindow = 3 * time.Second

// maxSpeedWindow bounds a window that saw tokens but no prefill end (a
// long prefill, or a pod whose prefills hang): it is dropped.
const maxSpeedWindow = time.Minute

// SpeedHalfLife is how fast old observations fade: a window counts half
// as much this much later (in the pod's observed time), so the estimate
// follows a pod whose speed changes.
const SpeedHalfLife = 2 * time.Minute

// SpeedEstimator learns a pod's prefill speed from successive scrapes of
// its Counters.
//
// A window of scrapes (at least SpeedWindow long, and seeing a prefill
// end) gives the prompt tokens the pod computed, U (prefix-cache queries
// less hits; without prefix caching, the prompt tokens), the seconds its
// prefills took, S (vLLM's prefill time: from a request's first schedule
// to its first token), and the window's length W. Prefills overlap: vLLM
// batches the chunks of several prompts, and decodes, into each step, so
// under load S counts each second of the pod's prefill work once per
// prompt sharing it, and S/U overstates a token's cost by the mean
// number of prompts prefilling together. The seconds the pod spent
// prefilling are at most S and at most W: the estimator takes
// B = min(S, W). When prefills do not overlap B = S; when they
// overlap throughout (a loaded pod), B = W; either way the pod computed
// U tokens in B seconds. (In between, prefills that overlap in bursts,
// B overstates, which errs on the prior's side of slow.) Windows are
// pooled, not averaged, and fade with SpeedHalfLife. A counter that goes
// back (the pod restarted) starts a new window.
//
// The mean context of a window's tokens, from its prompts' mean length
// and mean uncached part, prices their attention surcharge; the surcharge
// itself is not learned: the windows' mean context varies too little
// under a steady mix of prompts to tell it from the per-token cost, so the
// configured one holds.
//
// Not safe for concurrent use: one goroutine observes a pod at a time.
type SpeedEstimator struct {
	start   Counters
	startAt time.Time
	speed   *Speed // nil: nothing learned yet
}

// Observe reads a scrape taken at now and returns what is known of the
// pod's speed, nil while nothing is: a new Speed each time a window
// closes, the last one otherwise.
func (e *SpeedEstimator) Observe(now time.Time, c Counters) *Speed {
	if c.Has&(HasPrefillSeconds|HasPrefills) != HasPrefillSeconds|HasPrefills || c.Has&(HasPromptTokens|HasCacheQueries) == 0 {
		e.startAt = time.Time{}
		return e.speed
	}
	if e.startAt.IsZero() || back(e.start, c) || now.Before(e.startAt) {
		e.start, e.startAt = c, now
		return e.speed
	}
	w := now.Sub(e.startAt)
	prompts := c.PromptTokens - e.start.PromptTokens
	uncached := prompts
	if c.Has&(HasCacheQueries|HasCacheHits) == HasCacheQueries|HasCacheHits && e.start.Has&(HasCacheQueries|HasCacheHits) == HasCacheQueries|HasCacheHits {
		queries := c.CacheQueries - e.start.CacheQueries
		uncached = queries - (c.CacheHits - e.start.CacheHits)
		if c.Has&HasPromptTokens == 0 {
			prompts = queries
		}
	}
	seconds := c.PrefillSeconds - e.start.PrefillSeconds
	n := c.Prefills - e.start.Prefills
	switch {
	case uncached <= 0 && seconds <= 0 && n == 0: // idle: the window starts when work does
		e.start, e.startAt = c, now
		return e.speed
	case w < SpeedWindow:
		return e.speed
	case n < 1 || uncached <= 0 || seconds <= 0:
		if w > maxSpeedWindow {
			e.start, e.startAt = c, now
		}
		return e.speed
	}
	busy := min(seconds, w.Seconds())
	context := max(prompts/n-uncached/n/2, 0)
	next := &Speed{Busy: busy, Tokens: uncached, Context: uncached * context}
	if old := e.speed; old != nil {
		fade := math.Exp2(-w.Seconds() / SpeedHalfLife.Seconds())
		next.Busy += old.Busy * fade
		next.Tokens += old.Tokens * fade
		next.Context += old.Context * fade
	}
	e.speed = next
	e.start, e.startAt = c, now
	return next
}

// back reports whether a counter of now is below its value at start.
func back(start, now Counters) bool {
	return now.PromptTokens < start.PromptTokens || now.CacheQueries < start.CacheQueries ||
		now.CacheHits < start.CacheHits || now.PrefillSeconds < start.PrefillSeconds || now.Prefills < start.Prefills
}
