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
	ExternalHits   float64 // vllm:external_prefix_cache_hits_total: tokens a KV connector loaded (an offload tier, or a prefill pod's KV)
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
	HasExternalHits
)

// add adds o's figures to c's.
func (c Counters) add(o Counters) Counters {
	c.PromptTokens += o.PromptTokens
	c.CacheQueries += o.CacheQueries
	c.CacheHits += o.CacheHits
	c.ExternalHits += o.ExternalHits
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
	case HasExternalHits:
		c.ExternalHits += v
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
	"vllm:external_prefix_cache_hits_total":   HasExternalHits,
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
const PriorSeconds = 0.5

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
// long prefill, or a pod whose prefills hang): it is dropped. It is also
// how long the merged prefill intervals are kept.
const maxSpeedWindow = time.Minute

// SpeedHalfLife is how fast old observations fade: a window counts half
// as much this much later (in the pod's observed time), so the estimate
// follows a pod whose speed changes.
const SpeedHalfLife = 2 * time.Minute

// SpeedEstimator learns a pod's prefill speed from successive scrapes of
// its Counters.
//
// A window of scrapes (at least SpeedWindow long, and seeing a prefill
// end) gives the prompt tokens the pod computed, U (the prompt tokens of
// the prefills that ended, times the share of the prefix-cache queries
// that missed), and the seconds the pod spent prefilling them, B: the
// speed is U/B.
//
// B is not the sum of the prefill times vLLM reports (each request's time
// from its first schedule to its first token). Prefills overlap: vLLM
// batches the chunks of several prompts, and decodes, into each step, so
// under load that sum counts each second of the pod's prefill once per
// prompt sharing it, and overstates a token's cost by the number of
// prompts prefilling together. B is the time at least one prefill ran:
// the union of the requests' prefill intervals. Each scrape tells how
// many prefills ended since the last one and their summed time: the
// estimator takes each for lasting the mean of those times, all ending
// together if that is longer than the scrape interval (they overlapped),
// else at evenly spaced times in it, merges those intervals into the ones
// seen before and counts only the time they add. Prompts
// one at a time: B is the sum. A pod prefilling throughout: B is the wall
// time. Bursts: the bursts' length. B is as exact as the scrapes' spacing
// allows: a prefill's end is known to a scrape interval, so prompts that
// follow one another back to back with no overlap, and no gap, show gaps
// and overlaps of up to an interval between them (about interval/6 of
// error per prompt).
//
// Windows are pooled (Σ B over Σ U, not an average of ratios) and fade
// with SpeedHalfLife of the pod's windows; an idle pod keeps what it
// learned. A counter that goes back (the pod restarted) starts afresh.
//
// The mean context of a window's tokens, from its prompts' mean length
// and mean uncached part, prices their attention surcharge; the surcharge
// itself is not learned: the windows' mean context varies too little
// under a steady mix of prompts to tell it from the per-token cost, so the
// configured one holds.
//
// Not safe for concurrent use: one goroutine observes a pod at a time.
type SpeedEstimator struct {
	start   Counters // at the window's start
	startAt time.Time
	last    Counters // at the last scrape
	lastAt  time.Time
	busy    float64 // seconds the window's prefill intervals added to spans
	// spans are the merged prefill intervals of the last maxSpeedWindow,
	// in seconds since epoch, in order.
	spans []span
	epoch time.Time
	speed *Speed // nil: nothing learned yet
}

// span is an interval of time in seconds.
type span struct{ from, to float64 }

// Observe reads a scrape taken at now and returns what is known of the
// pod's speed, nil while nothing is: a new Speed each time a window
// closes, the last one otherwise.
func (e *SpeedEstimator) Observe(now time.Time, c Counters) *Speed {
	if c.Has&(HasPrefillSeconds|HasPrefills) != HasPrefillSeconds|HasPrefills || c.Has&(HasPromptTokens|HasCacheQueries) == 0 {
		e.startAt = time.Time{}
		return e.speed
	}
	if e.startAt.IsZero() || back(e.last, c) || now.Before(e.lastAt) {
		e.start, e.startAt, e.last, e.lastAt, e.busy, e.spans, e.epoch = c, now, c, now, 0, e.spans[:0], now
		return e.speed
	}
	if n := c.Prefills - e.last.Prefills; n > 0 {
		// The n prefills ended in (lastAt, now], each after the mean of
		// their times, d. Longer than the interval, they overlapped: all
		// end together. Shorter, they may have followed one another: they
		// end at evenly spaced times.
		d := (c.PrefillSeconds - e.last.PrefillSeconds) / n
		from, gap := e.lastAt.Sub(e.epoch).Seconds(), now.Sub(e.lastAt).Seconds()
		ends := min(int(n), maxEnds)
		if d >= gap {
			from, ends = from+gap/2, 1
		}
		for m := range ends {
			end := from + gap*(float64(m)+0.5)/float64(ends)
			e.busy += e.cover(end-d, end)
		}
	}
	e.last, e.lastAt = c, now
	w := now.Sub(e.startAt)
	prompts, uncached := e.tokens(c)
	n := c.Prefills - e.start.Prefills
	switch {
	case uncached <= 0 && n == 0: // idle: the window starts when work does
		e.start, e.startAt, e.busy = c, now, 0
		return e.speed
	case w < SpeedWindow:
		return e.speed
	case n < 1 || uncached <= 0 || e.busy <= 0:
		if w > maxSpeedWindow {
			e.start, e.startAt, e.busy = c, now, 0
		}
		return e.speed
	}
	context := max(prompts/n-uncached/n/2, 0)
	next := &Speed{Busy: e.busy, Tokens: uncached, Context: uncached * context}
	if old := e.speed; old != nil {
		fade := math.Exp2(-w.Seconds() / SpeedHalfLife.Seconds())
		next.Busy += old.Busy * fade
		next.Tokens += old.Tokens * fade
		next.Context += old.Context * fade
	}
	e.speed = next
	e.start, e.startAt, e.busy = c, now, 0
	return next
}

// tokens is the prompt tokens of the prefills that ended in the window,
// and of them the ones computed (not cached). vLLM counts a prompt's
// tokens when its first token comes out, as its prefill time, but its
// prefix-cache queries and hits when it is scheduled: the window's
// computed tokens are its prompt tokens times the share its queries
// missed both the prefix cache and, with a KV connector, the tokens it
// loaded (over the pod's life when the window queried nothing). Without
// the prompt counter, the queries stand for it; without the cache
// counters, every prompt token was computed.
func (e *SpeedEstimator) tokens(c Counters) (prompts, uncached float64) {
	const cache = HasCacheQueries | HasCacheHits
	hasCache := c.Has&cache == cache && e.start.Has&cache == cache
	if c.Has&HasPromptTokens == 0 {
		if !hasCache {
			return 0, 0
		}
		queries := c.CacheQueries - e.start.CacheQueries
		missed := queries - (c.CacheHits - e.start.CacheHits)
		if c.Has&HasExternalHits != 0 && e.start.Has&HasExternalHits != 0 {
			missed -= c.ExternalHits - e.start.ExternalHits
		}
		return queries, max(missed, 0)
	}
	prompts = c.PromptTokens - e.start.PromptTokens
	if !hasCache {
		return prompts, prompts
	}
	external := c.Has&HasExternalHits != 0 && e.start.Has&HasExternalHits != 0
	queries, hits := c.CacheQueries-e.start.CacheQueries, c.CacheHits-e.start.CacheHits
	if external {
		hits += c.ExternalHits - e.start.ExternalHits
	}
	if queries <= 0 {
		queries, hits = c.CacheQueries, c.CacheHits
		if external {
			hits += c.ExternalHits
		}
	}
	if queries <= 0 {
		return prompts, prompts
	}
	return prompts, prompts * max(1-hits/queries, 0)
}

// maxEnds bounds the prefill intervals one scrape adds: more prefills
// ending between two scrapes are spread over this many ends.
const maxEnds = 64

// cover merges [from, to] into the spans, to at or after every span's
// end, and returns the time it adds to them. Spans ending more than
// maxSpeedWindow before to are forgotten.
func (e *SpeedEstimator) cover(from, to float64) float64 {
	k, old := len(e.spans), 0.0
	for k > 0 && e.spans[k-1].to >= from {
		sp := e.spans[k-1]
		old += sp.to - sp.from
		from = min(from, sp.from)
		k--
	}
	added := to - from - old
	e.spans = append(e.spans[:k], span{from, to})
	gone := 0
	for gone < len(e.spans)-1 && e.spans[gone].to < to-maxSpeedWindow.Seconds() {
		gone++
	}
	if gone > 0 {
		e.spans = append(e.spans[:0], e.spans[gone:]...)
	}
	return max(added, 0)
}

// back reports whether a counter of now is below its value at start.
func back(start, now Counters) bool {
	return now.PromptTokens < start.PromptTokens || now.CacheQueries < start.CacheQueries ||
		now.CacheHits < start.CacheHits || now.ExternalHits < start.ExternalHits ||
		now.PrefillSeconds < start.PrefillSeconds || now.Prefills < start.Prefills
}
