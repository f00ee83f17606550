package router

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// Config configures a Router.
type Config struct {
	// PrefillSecondsPerToken is the predicted prefill cost of one uncached
	// prompt token on a pod. Default 0.0001 (10k tokens/s).
	PrefillSecondsPerToken float64
	// PrefillAttentionPerToken is the prefill surcharge per token of
	// context: attention makes a prompt token prefilled after c others cost
	// PrefillSecondsPerToken × (1 + c × PrefillAttentionPerToken), so a long
	// prompt's uncached tail costs more than a short prompt of as many
	// tokens. Default 1.83e-5 (+15% at 8k tokens of context, +60% at 32k:
	// Llama-3.1-8B on an H100); 0 prices every token alike.
	PrefillAttentionPerToken float64
	// LearnSpeeds prices each pod at the prefill speed learned from its
	// vLLM metrics (fleet.SpeedEstimator, fed by the fleet's Scraper),
	// PrefillSecondsPerToken being the prior worth fleet.PriorSeconds of
	// evidence, so that a fleet mixing GPUs or models is priced right;
	// false prices every pod at PrefillSecondsPerToken. Default true.
	LearnSpeeds bool
	// WaitingSecondsPerRequest is the predicted prefill of a request waiting
	// on a pod (vllm:num_requests_waiting) that this router did not send
	// there (another replica's), before the router has queued any of its
	// own there to average. The router's own queued requests count by their
	// uncached prompt tokens instead. Default 0.05.
	WaitingSecondsPerRequest float64
	// RunningSecondsPerRequest is the predicted slowdown each request
	// running (vllm:num_requests_running) or waiting on a pod adds: its
	// decode share of the steps ahead. Default 0.002.
	RunningSecondsPerRequest float64
	// KVPressure weighs how full the pods' KV caches are against prompt
	// tokens a pod does not cache. With u the candidates' mean
	// vllm:kv_cache_usage_perc (at most MaxKVUsage), an uncached token costs
	// its prefill times 1 + KVPressure × u/(1−u): a fleet whose caches are
	// full cannot take a prompt's new blocks without evicting other cached
	// prefixes or preempting running requests, so a cache hit behind a
	// queue then beats a copy of the prefix on a less busy pod. The mean,
	// not each pod's own usage: scrapes are up to an interval old, and a
	// per-pod term would send every request of an interval to the emptiest
	// pod. Default 1; 0 turns it off.
	KVPressure float64
	// ReuseWeight weighs the cached blocks a prompt's new blocks evict.
	// With h the share of their prompts recent requests found cached on
	// the candidates (fleet.Load.Reuse), an uncached token costs
	// ReuseWeight × h prefills more: the expected recomputation of the
	// block it pushes out of a full cache. It keeps a prefix on its pod
	// when the fleet's caches hold a reused working set, and leaves pods
	// to load when prompts rarely repeat. Default 1; 0 turns it off.
	ReuseWeight float64
	// TierWeights is how much a cached block saves in each tier, relative to
	// GPU: a CPU block still has to be copied back. Default GPU 1.0, CPU 0.8,
	// disk 0.5, other 0.5.
	TierWeights [kvindex.NumTiers]float64
	// Tolerance: pods whose predicted cost is within this fraction of the
	// best are equal and one is picked at random, so a shared prefix does
	// not send all traffic to one pod. Default 0.05.
	Tolerance float64
	// ToleranceSeconds is the same as an absolute margin. Default 0.001.
	ToleranceSeconds float64
	// PlacementTolerance widens the choice for a request that places a new
	// prefix: one the cheapest pod lacks more than half of. Its later
	// requests will follow it to whichever pod computes it, so the pick
	// decides where their load goes as well as this request's; the queue
	// at this instant does not foresee that load, the KV caches' use shows
	// where prefixes already live. Among the pods whose predicted cost is
	// within PlacementTolerance × h of the cheapest (h the candidates' mean
	// share of a prompt found cached lately, fleet.Load.Reuse), it picks
	// the one whose KV cache is least used (vllm:kv_cache_usage_perc),
	// ties at random. Where prompts rarely repeat, h and the window are
	// about nothing and the cheapest pod wins. Default 0.2; 0 turns it off.
	PlacementTolerance float64
	// HomeHold turns on homes (homes.go) and says how hard a prefix's home
	// holds it. A request goes to its prefix's home pod unless the home's
	// predicted cost exceeds another pod's by more than this many times
	// that pod's prefill (a pod with no room for the prefix among its homes
	// priced as a cold prefill, since a copy there evicts its homes).
	// Homes keep each group of prompts on one pod and no pod's groups
	// beyond its KV cache (HomeFill), which the per-request cost cannot
	// see: it keeps a group where it is cached even while the pod's cache,
	// full of groups, evicts each before its next request. 0 turns homes
	// off. Default 1.
	HomeHold float64
	// HomeFill is the share of a pod's KV cache (fleet.Load.KVCapacity)
	// the footprints of the prefixes it homes may fill; the rest is left
	// to decoded tokens and to requests routed away from their homes.
	// Default 0.8.
	HomeFill float64
	// HomeIdle is how long a prefix unseen keeps its home, but for one its
	// home still holds (homes.go): it is looked at again each HomeIdle.
	// Default 60 s.
	HomeIdle time.Duration
	// HomeTable bounds the prefixes the router keeps homes for; past it
	// the least recently seen leave. About 260 bytes each, and about 25 per
	// 16 distinct blocks seen under it, at most 2^21 of those in all (about
	// 50 MB; past that too the least recently seen leave). Default 65536.
	HomeTable int
	// StaleMetricsAfter is how long a pod's metrics scrapes may fail before
	// its last figures are too old to route by. Such a pod, and one whose
	// scrapes have failed without ever succeeding, is blind: it is left out
	// of the candidates while a pod with fresh figures can serve the
	// request (see Router.candidates). Only a fleet a fleet.Scraper runs
	// for has blind pods. Default 10s; 0 never counts figures stale (a pod
	// never scraped is still blind).
	StaleMetricsAfter time.Duration
	// Endpoints is how many endpoints a decision names: the pick, then the
	// next best by cost as fallbacks the proxy tries in order when one
	// fails (the Endpoint Picker protocol's list, which needs the proxy's
	// override_host load balancing; an ORIGINAL_DST cluster takes only
	// one). Never a pod outside the subset or of another model. Default 1.
	Endpoints int
	// HoldPrefilling turns on the router's queue (hold.go): when the
	// prompts queued for a model's pods (this router's routed and not yet
	// prefilled, and those it holds) pass what their KV caches hold, a pod
	// with this many of the router's requests awaiting their first token
	// takes no more, and requests wait in the router until one has room;
	// it then gets the waiting request that finds the most of its prompt
	// cached there. 0: never hold. Default 2.
	HoldPrefilling int
	// HoldMaxWait bounds a request's wait in the router's queue: it is then
	// routed as if nothing were held. Default 30 s. In BUFFERED mode the
	// proxy's ext_proc message_timeout must exceed it.
	HoldMaxWait time.Duration
	// HoldScan is how many of the oldest waiting requests a pod with room
	// is matched against. Default 64.
	HoldScan int
	// SaturationWaiting and SaturationKV say when a pod is saturated: this
	// many requests waiting in its queue, or its KV cache this full (0..1).
	// When every candidate is, a request whose objective's priority is below
	// zero is shed with 429. Defaults 5 and 0.8, the reference Endpoint
	// Picker's.
	SaturationWaiting int
	SaturationKV      float64
	// MaxTokenizeBytes bounds the work one request may cost: a request whose
	// body is larger is not tokenized but routed by load (ReasonTooLong),
	// so one huge prompt cannot hold a core for long. About 4 bytes a
	// token; tokenizing runs near 25 MB/s a core. Default 4 MiB; 0: no
	// bound but the body's own.
	MaxTokenizeBytes int
	// PDThreshold is where prefill/decode disaggregation starts to pay:
	// when a model's candidates include prefill pods (pod.RolePrefill), the
	// destination is a decode pod (or one of both roles), and a prefill pod
	// computes the prompt first only when the destination lacks at least
	// this many of its tokens; a smaller uncached part is computed by the
	// decode pod itself, sparing the KV transfer. Default 512 tokens.
	PDThreshold int
	// PrefillHeader is the request header that names the chosen prefill
	// pod (ip:port) for the decode pod's sidecar. Default
	// x-prefiller-host-port, llm-d's routing sidecar's (and Dynamo's).
	PrefillHeader string
	// SlowDecision is the decision time above which the decision is logged
	// at Warn. Default 50ms.
	SlowDecision time.Duration
	// IntN breaks ties among near-best pods: a uniform int in [0, n). It is
	// called from concurrent Route calls. Nil means math/rand/v2.IntN; the
	// fleet simulator injects a seeded one so that its runs repeat.
	IntN func(n int) int
	// Now is the clock the queue estimate reads (how long the pod has
	// worked on the prefill at the head of the router's queue there). Nil
	// means time.Now; the fleet simulator injects its own.
	Now func() time.Time
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		PrefillSecondsPerToken:   0.0001,
		PrefillAttentionPerToken: 1.83e-5,
		LearnSpeeds:              true,
		WaitingSecondsPerRequest: 0.05,
		RunningSecondsPerRequest: 0.002,
		KVPressure:               1,
		ReuseWeight:              1,
		TierWeights:              [kvindex.NumTiers]float64{1.0, 0.8, 0.5, 0.5},
		Tolerance:                0.05,
		ToleranceSeconds:         0.001,
		PlacementTolerance:       0.2,
		HomeHold:                 1,
		HomeFill:                 0.8,
		HomeIdle:                 time.Minute,
		HomeTable:                1 << 16,
		StaleMetricsAfter:        fleet.DefaultStaleAfter,
		SlowDecision:             50 * time.Millisecond,
		MaxTokenizeBytes:         4 << 20,
		Endpoints:                1,
		HoldPrefilling:           2,
		HoldMaxWait:              30 * time.Second,
		HoldScan:                 64,
		SaturationWaiting:        5,
		SaturationKV:             0.8,
		PDThreshold:              512,
		PrefillHeader:            "x-prefiller-host-port",
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	nonNeg := func(name string, v float64) {
		if v < 0 || v != v || math.IsInf(v, 1) {
			errs = append(errs, fmt.Errorf("%s = %v, want finite and >= 0", name, v))
		}
	}
	nonNeg("prefill seconds per token", c.PrefillSecondsPerToken)
	nonNeg("prefill attention per token", c.PrefillAttentionPerToken)
	nonNeg("reuse weight", c.ReuseWeight)
	nonNeg("waiting seconds per request", c.WaitingSecondsPerRequest)
	nonNeg("running seconds per request", c.RunningSecondsPerRequest)
	nonNeg("KV pressure", c.KVPressure)
	nonNeg("tolerance", c.Tolerance)
	nonNeg("tolerance seconds", c.ToleranceSeconds)
	nonNeg("placement tolerance", c.PlacementTolerance)
	nonNeg("home hold", c.HomeHold)
	if c.HomeHold > 0 && (c.HomeFill <= 0 || c.HomeFill > 1 || c.HomeIdle <= 0 || c.HomeTable < 1) {
		errs = append(errs, fmt.Errorf("home fill = %v, home idle = %v and home table = %d, want fill in (0, 1], idle > 0 and table >= 1 while homes are on", c.HomeFill, c.HomeIdle, c.HomeTable))
	}
	if c.StaleMetricsAfter < 0 {
		errs = append(errs, fmt.Errorf("stale metrics after = %v, want >= 0", c.StaleMetricsAfter))
	}
	if c.HoldPrefilling < 0 {
		errs = append(errs, fmt.Errorf("hold prefilling = %d, want >= 0", c.HoldPrefilling))
	}
	if c.HoldPrefilling > 0 && (c.HoldMaxWait <= 0 || c.HoldScan < 1) {
		errs = append(errs, fmt.Errorf("hold max wait = %v and hold scan = %d, want > 0 both while holding", c.HoldMaxWait, c.HoldScan))
	}
	if c.SaturationWaiting < 0 {
		errs = append(errs, fmt.Errorf("saturation waiting = %d, want >= 0", c.SaturationWaiting))
	}
	if c.SaturationKV < 0 || c.SaturationKV > 1 || c.SaturationKV != c.SaturationKV {
		errs = append(errs, fmt.Errorf("saturation KV = %v, want in [0, 1]", c.SaturationKV))
	}
	if c.PDThreshold < 0 {
		errs = append(errs, fmt.Errorf("P/D threshold = %d tokens, want >= 0", c.PDThreshold))
	}
	if c.PrefillHeader == "" || strings.ToLower(c.PrefillHeader) != c.PrefillHeader || strings.ContainsAny(c.PrefillHeader, " :\t") {
		errs = append(errs, fmt.Errorf("prefill header %q, want a lower-case header name", c.PrefillHeader))
	}
	if c.Endpoints < 1 || c.Endpoints > 16 {
		errs = append(errs, fmt.Errorf("endpoints = %d, want in [1, 16]", c.Endpoints))
	}
	if c.MaxTokenizeBytes < 0 {
		errs = append(errs, fmt.Errorf("max tokenize bytes = %d, want >= 0", c.MaxTokenizeBytes))
	}
	for t, w := range c.TierWeights {
		if w < 0 || w > 1 || w != w {
			errs = append(errs, fmt.Errorf("tier weight %s = %v, want in [0, 1]", kvindex.Tier(t), w))
		}
	}
	if c.PrefillSecondsPerToken == 0 {
		errs = append(errs, errors.New("prefill seconds per token = 0: cached prefixes would be worth nothing"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("router: invalid config: %w", err)
	}
	return nil
}
