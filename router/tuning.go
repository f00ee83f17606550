package router

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Tuning holds the policy's tuned numbers: what the cost model, placement,
// homes and the queue weigh, each with where its value comes from. They
// are not settings (an operator can neither measure nor need to decide
// them); the fleet simulator varies them to compare designs. Each commit
// named below holds the measurement that chose the value.
type Tuning struct {
	// PrefillAttentionPerToken is the prefill surcharge per token of
	// context: a prompt token prefilled after c others costs
	// 1 + c × PrefillAttentionPerToken prefills. 1.83e-5: +15% at 8k
	// tokens of context, +60% at 32k, Llama-3.1-8B on an H100 (335aeba).
	PrefillAttentionPerToken float64
	// WaitingSecondsPerRequest is the prefill predicted for a request
	// waiting on a pod that this replica did not send there, until its own
	// queued requests there give an average. 0.05 s, the first cost model's
	// estimate (97de353).
	WaitingSecondsPerRequest float64
	// RunningSecondsPerRequest is the slowdown each request running or
	// waiting on a pod adds: its share of the decode steps ahead. 2 ms, the
	// first cost model's estimate (97de353).
	RunningSecondsPerRequest float64
	// KVPressure weighs the fleet's mean KV cache use against uncached
	// tokens: an uncached token costs 1 + KVPressure × u/(1−u) prefills
	// (b6c98d5). ReuseWeight weighs the cached block an uncached token
	// evicts, times the share of prompts the caches held lately (1975c64).
	// Both 1: the simplest weights that won the simulator's shared-prefix
	// and conversation workloads.
	KVPressure, ReuseWeight float64
	// TierWeights is what a cached block saves in each tier relative to
	// GPU: a CPU block is still copied back. 1, 0.8, 0.5, 0.5 (GPU, CPU,
	// disk, other), the first cost model's estimates (97de353).
	TierWeights [kvindex.NumTiers]float64
	// ToleranceSeconds is Config.Tolerance's absolute floor: pods within 1
	// ms of the best are equal (97de353).
	ToleranceSeconds float64
	// PlacementTolerance widens the choice for a request that places a
	// new prefix: within PlacementTolerance × the share of prompts found
	// cached lately, the least used KV cache wins. 0.2 (ff55035); 0 turns
	// placement off.
	PlacementTolerance float64
	// HomeMargin is how hard a home keeps its prefix: a request goes to
	// its prefix's home unless the home costs more than another pod by
	// HomeMargin times that pod's prefill. 1 (5e77b1e; measured in ca5830d
	// and c1b4689).
	HomeMargin float64
	// HomeFill is the share of a pod's KV cache the prefixes it homes may
	// fill; the rest is left to decoded tokens and to requests routed away
	// from their homes. 0.8 (5e77b1e; measured in 76c40b1 and c1b4689).
	HomeFill float64
	// HomeIdle is how long an unseen prefix keeps its home unless its home
	// still caches it; it is looked at again each HomeIdle. 1 minute
	// (5e77b1e, c8a01d6).
	HomeIdle time.Duration
	// HomeTable bounds the prefixes homed; past it the least recently
	// seen leave. About 260 bytes each: 65536 is about 17 MB (5e77b1e).
	HomeTable int
	// QueueScan is how many of the oldest waiting requests a pod with room
	// is matched against. 64 (20405cc).
	QueueScan int
	// SlowDecision is the decision time above which a decision is logged
	// at Warn: 50 ms (97de353).
	SlowDecision time.Duration
}

// DefaultTuning returns the values documented on Tuning's fields.
func DefaultTuning() Tuning {
	return Tuning{
		PrefillAttentionPerToken: 1.83e-5,
		WaitingSecondsPerRequest: 0.05,
		RunningSecondsPerRequest: 0.002,
		KVPressure:               1,
		ReuseWeight:              1,
		TierWeights:              [kvindex.NumTiers]float64{1.0, 0.8, 0.5, 0.5},
		ToleranceSeconds:         0.001,
		PlacementTolerance:       0.2,
		HomeMargin:               1,
		HomeFill:                 0.8,
		HomeIdle:                 time.Minute,
		HomeTable:                1 << 16,
		QueueScan:                64,
		SlowDecision:             50 * time.Millisecond,
	}
}

// The tuned constants the code reads directly.
const (
	// MaxKVUsage bounds the KV use the pressure term reads, so that it
	// stays finite and a queue can still outweigh it: at 0.9 an uncached
	// token costs at most 1 + 9 × KVPressure prefills (b6c98d5).
	MaxKVUsage = 0.9
	// ReuseWindow is about how many requests a pod's reuse mean
	// (fleet.Load.Reuse) spans (1975c64).
	ReuseWindow = 256
	// queueLost is the share of what routing found matched below which the
	// pods' prefix-cache hits open the queue: a quarter of it lost between
	// routing and admission. At 1, a fleet merely overloaded whose hits
	// dip below the matched share for a moment opened it too and waited
	// longer for its first tokens (3ae573b).
	queueLost = 0.75
	// othersSlack is how many requests the pods may run beyond 1.5 times
	// those this replica has in flight there (the scrapes lag its
	// decisions) before homes take others for routing there too (04f3f5a).
	othersSlack = 4
	// sharedMoveSlack is how far a pod's homes may pass their fill, while
	// homes are shared between replicas, before a prefix moves off it: two
	// replicas that place prefixes within one sync each fill a pod, and a
	// move costs a cold prefill (82727f7).
	sharedMoveSlack = 0.1
)

// validate reports every problem of t at once.
func (t Tuning) validate() error {
	var errs []error
	for _, w := range []struct {
		name string
		v    float64
	}{
		{"prefill attention per token", t.PrefillAttentionPerToken},
		{"waiting seconds per request", t.WaitingSecondsPerRequest},
		{"running seconds per request", t.RunningSecondsPerRequest},
		{"KV pressure", t.KVPressure},
		{"reuse weight", t.ReuseWeight},
		{"tolerance seconds", t.ToleranceSeconds},
		{"placement tolerance", t.PlacementTolerance},
		{"home margin", t.HomeMargin},
	} {
		if w.v < 0 || math.IsNaN(w.v) || math.IsInf(w.v, 1) {
			errs = append(errs, fmt.Errorf("tuning: %s = %v, want finite and >= 0", w.name, w.v))
		}
	}
	if t.HomeFill <= 0 || t.HomeFill > 1 || t.HomeIdle <= 0 || t.HomeTable < 1 || t.QueueScan < 1 {
		errs = append(errs, fmt.Errorf("tuning: home fill %v, home idle %v, home table %d, queue scan %d: want fill in (0, 1] and the others > 0",
			t.HomeFill, t.HomeIdle, t.HomeTable, t.QueueScan))
	}
	for i, w := range t.TierWeights {
		if w < 0 || w > 1 || math.IsNaN(w) {
			errs = append(errs, fmt.Errorf("tuning: tier weight %s = %v, want in [0, 1]", kvindex.Tier(i), w))
		}
	}
	return errors.Join(errs...)
}
