package fleet

import (
	"math"
	"testing"
	"time"
)

// sharedPod is a pod prefilling prompts of hit cached and u uncached
// tokens at a cost of c seconds per uncached token, k of them at a time
// sharing each step (chunked prefill), one every period seconds (period
// at least u × c, k = 1 when the prompts are spaced out). Its counters
// count as vLLM's do: a prompt's cache queries and hits when it is
// scheduled, its prompt tokens and prefill time when its first token
// comes out.
type sharedPod struct {
	c, period float64
	u, hit    float64
	k         int
}

// at is the pod's counters at t seconds after it started, plus base.
func (p sharedPod) at(t float64, base Counters) Counters {
	prefill := float64(p.k) * p.u * p.c // each prompt gets 1/k of the pod
	done := 0.0                         // first tokens so far
	if t >= prefill {
		done = math.Floor((t-prefill)/p.period) + 1
	}
	scheduled := math.Floor(t/p.period) + 1
	prompt := p.hit + p.u
	return Counters{
		PromptTokens:   base.PromptTokens + done*prompt,
		CacheQueries:   base.CacheQueries + scheduled*prompt,
		CacheHits:      base.CacheHits + scheduled*p.hit,
		PrefillSeconds: base.PrefillSeconds + done*prefill,
		Prefills:       base.Prefills + done,
		Has:            HasPromptTokens | HasCacheQueries | HasCacheHits | HasPrefillSeconds | HasPrefills,
	}
}

// observe scrapes p, started at t0 with counters at base, every 100ms
// from t0 to t1 seconds into e.
func observe(e *SpeedEstimator, p sharedPod, t0, t1 float64, base Counters) *Speed {
	epoch := time.Unix(1e9, 0)
	var s *Speed
	for t := t0; t <= t1; t += 0.1 {
		s = e.Observe(epoch.Add(time.Duration(t*float64(time.Second))), p.at(t-t0, base))
	}
	return s
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

// TestSpeedEstimatorUnderConcurrency checks that the learned cost is the
// pod's whether its prompts come one at a time or overlap: the prefill
// time vLLM reports per prompt then counts the shared seconds once per
// prompt, k times the cost.
//
// Prompts one at a time back to back, neither overlapping nor leaving the
// pod idle, are the hard case: a prefill's end is known to a scrape
// interval (100ms), so consecutive prefills seem to overlap by up to one,
// and the estimate errs fast by up to interval / (2 × a prefill's time),
// 20% for these 250ms prefills.
func TestSpeedEstimatorUnderConcurrency(t *testing.T) {
	const c = 1.0 / 12000 // seconds per token
	for _, tt := range []struct {
		p   sharedPod
		tol float64
	}{
		{sharedPod{c: c, u: 2000, hit: 0, k: 1, period: 0.5}, 0.03},      // one at a time, a third busy
		{sharedPod{c: c, u: 200, hit: 0, k: 1, period: 0.03}, 0.03},      // short prefills, several between scrapes
		{sharedPod{c: c, u: 3000, hit: 1000, k: 1, period: 0.25}, 0.2},   // back to back
		{sharedPod{c: c, u: 3000, hit: 1000, k: 2, period: 0.25}, 0.03},  // back to back, each admitted before the last ends
		{sharedPod{c: c, u: 1500, hit: 6000, k: 4, period: 0.125}, 0.03}, // four at a time
		{sharedPod{c: c, u: 1000, hit: 0, k: 8, period: 1000 * c}, 0.03},
	} {
		p := tt.p
		var e SpeedEstimator
		s := observe(&e, p, 0, 90, Counters{})
		if s == nil {
			t.Fatalf("%+v: nothing learned in 90s", p)
		}
		if got := s.Busy / s.Tokens; !near(got, c, tt.tol) {
			t.Errorf("%+v: learned %.0f tokens/s, want %.0f ±%g%%", p, 1/got, 1/c, 100*tt.tol)
		}
		if naive := p.at(90, Counters{}); p.k > 1 && near(naive.PrefillSeconds/(naive.CacheQueries-naive.CacheHits), c, 0.5) {
			t.Errorf("%+v: Σ prefill time / Σ tokens = %g s/token, within 50%% of the truth: the case tests nothing", p, naive.PrefillSeconds/(naive.CacheQueries-naive.CacheHits))
		}
		// The prior (twice as fast) gives way to what was learned.
		prior := c / 2
		if got, tol := s.SecondsPerToken(prior, 0), tt.tol+0.07; !near(got, c, tol) { // the prior's pull: up to 7%
			t.Errorf("%+v: blended with a prior of %.0f tokens/s: %.0f tokens/s, want %.0f ±%g%%", p, 1/prior, 1/got, 1/c, 100*tol)
		}
	}
}

// TestSpeedEstimatorAttention checks that the learned cost is the cost at
// no context, the prompts' surcharge taken at their mean context.
func TestSpeedEstimatorAttention(t *testing.T) {
	const base, attention = 1.0 / 12000, 2e-5
	const u, hit = 2000.0, 8000.0
	c := base * (1 + attention*(hit+u/2)) // the cost of these prompts' tokens
	var e SpeedEstimator
	s := observe(&e, sharedPod{c: c, u: u, hit: hit, k: 2, period: u * c}, 0, 120, Counters{})
	if got := s.SecondsPerToken(base, attention); !near(got, base, 0.03) {
		t.Errorf("at no context: %.0f tokens/s, want %.0f ±3%%", 1/got, 1/base)
	}
	if got := s.SecondsPerToken(base, 0); !near(got, c, 0.03) {
		t.Errorf("with no surcharge: %.0f tokens/s, want the prompts' %.0f ±3%%", 1/got, 1/c)
	}
}

// TestSpeedEstimatorRestart checks that counters starting over (the pod
// restarted) neither spoil the estimate nor stop the learning.
func TestSpeedEstimatorRestart(t *testing.T) {
	const c = 1.0 / 5000
	p := sharedPod{c: c, u: 1000, k: 3, period: 1000 * c}
	var e SpeedEstimator
	before := observe(&e, p, 0, 30, Counters{PromptTokens: 5e6, CacheQueries: 5e6, CacheHits: 1e6, PrefillSeconds: 900, Prefills: 3000})
	after := observe(&e, p, 30.1, 60, Counters{}) // a new process: counters from zero
	if before == nil || after == nil || after == before {
		t.Fatalf("learned %v before the restart, %v after; want an estimate updated after it", before, after)
	}
	if got := after.Busy / after.Tokens; !near(got, c, 0.03) {
		t.Errorf("after a restart: %.0f tokens/s, want %.0f ±3%%", 1/got, 1/c)
	}
}

// TestSpeedEstimatorNeedsCounters checks that a pod without the prefill
// histogram or token counters, or idle, teaches nothing: the prior holds.
func TestSpeedEstimatorNeedsCounters(t *testing.T) {
	p := sharedPod{c: 1e-4, u: 1000, k: 1, period: 1}
	for name, drop := range map[string]Has{
		"no prefill time":   HasPrefillSeconds,
		"no prefill count":  HasPrefills,
		"no token counters": HasPromptTokens | HasCacheQueries,
	} {
		var e SpeedEstimator
		epoch := time.Unix(1e9, 0)
		for t := 0.0; t < 30; t += 0.1 {
			c := p.at(t, Counters{})
			c.Has &^= drop
			e.Observe(epoch.Add(time.Duration(t*float64(time.Second))), c)
		}
		if s := e.Observe(epoch.Add(30*time.Second), Counters{}); s != nil {
			t.Errorf("%s: learned %+v", name, *s)
		}
	}
	var e SpeedEstimator
	idle := p.at(0, Counters{})
	for t := range 300 {
		e.Observe(time.Unix(1e9, 0).Add(time.Duration(t)*100*time.Millisecond), idle)
	}
	var nilSpeed *Speed
	if s := e.Observe(time.Unix(1e9+30, 0), idle); s != nil || nilSpeed.SecondsPerToken(1e-4, 1e-5) != 1e-4 {
		t.Errorf("idle pod: learned %v; a nil Speed's cost %g, want the prior", s, nilSpeed.SecondsPerToken(1e-4, 1e-5))
	}
}

// TestSpeedEstimatorFollowsChange checks that old windows fade: a pod
// that slows down is learned slow within a few half-lives.
func TestSpeedEstimatorFollowsChange(t *testing.T) {
	const c = 1.0 / 10000
	var e SpeedEstimator
	fast := sharedPod{c: c, u: 1000, k: 2, period: 1000 * c}
	observe(&e, fast, 0, 300, Counters{})
	slow := sharedPod{c: 2 * c, u: 1000, k: 2, period: 2000 * c}
	end := fast.at(300, Counters{})
	s := observe(&e, slow, 300.1, 300+3*SpeedHalfLife.Seconds(), end)
	if got := s.Busy / s.Tokens; !near(got, 2*c, 0.1) {
		t.Errorf("after %v at half the speed: %.0f tokens/s, want %.0f ±10%%", 3*SpeedHalfLife, 1/got, 1/(2*c))
	}
}

// TestSpeedEstimatorBursts: prompts arriving k at a time, every period,
// share the pod until they all end together, k × u × c later; then the pod
// idles. Their prefill times sum to k times the pod's busy time, which is
// also well under the wall time: neither figure is the busy time, the
// union of the prefills' intervals is.
func TestSpeedEstimatorBursts(t *testing.T) {
	const c, u, k, period = 1.0 / 10000, 2000.0, 4.0, 2.0
	at := func(t float64) Counters {
		started := math.Floor(t/period) + 1
		done := 0.0
		if t >= k*u*c {
			done = math.Floor((t-k*u*c)/period) + 1
		}
		return Counters{
			PromptTokens: done * k * u, CacheQueries: started * k * u,
			PrefillSeconds: done * k * (k * u * c), Prefills: done * k,
			Has: HasPromptTokens | HasCacheQueries | HasCacheHits | HasPrefillSeconds | HasPrefills,
		}
	}
	var e SpeedEstimator
	var s *Speed
	for t := 0.0; t <= 120; t += 0.1 {
		s = e.Observe(time.Unix(1e9, 0).Add(time.Duration(t*float64(time.Second))), at(t))
	}
	if got := s.Busy / s.Tokens; !near(got, c, 0.05) {
		t.Errorf("bursts of %g: learned %.0f tokens/s, want %.0f ±5%%", k, 1/got, 1/c)
	}
}

// TestSpeedEstimatorExternalHits: tokens a KV connector loaded (an
// offload tier's, or a prefill pod's KV on a decode pod) were not
// computed: a pod whose prompts come half from its connector is learned
// at its speed, not twice it.
func TestSpeedEstimatorExternalHits(t *testing.T) {
	const c = 1.0 / 8000
	p := sharedPod{c: c, u: 1000, hit: 1000, k: 2, period: 1000 * c}
	var e SpeedEstimator
	var s *Speed
	for t := 0.0; t <= 60; t += 0.1 {
		x := p.at(t, Counters{})
		// The pod's local cache holds none of it: the connector loads the
		// hit part.
		x.ExternalHits, x.CacheHits = x.CacheHits, 0
		x.Has |= HasExternalHits
		s = e.Observe(time.Unix(1e9, 0).Add(time.Duration(t*float64(time.Second))), x)
	}
	if got := s.Busy / s.Tokens; !near(got, c, 0.03) {
		t.Errorf("learned %.0f tokens/s, want %.0f ±3%%", 1/got, 1/c)
	}
}

// TestPrefillSecondsPerTokenAllocatesNothing: a decision reads each
// candidate's speed without allocating, learned or not.
func TestPrefillSecondsPerTokenAllocatesNothing(t *testing.T) {
	var learned, prior Load
	learned.SetSpeed(&Speed{Busy: 10, Tokens: 50000, Context: 1e6})
	sum := 0.0
	if n := testing.AllocsPerRun(100, func() {
		sum += learned.PrefillSecondsPerToken(1e-4, 1.83e-5) + prior.PrefillSecondsPerToken(1e-4, 1.83e-5)
	}); n != 0 {
		t.Errorf("%v allocations per read, want 0", n)
	}
	if want := (PriorSeconds+10)/(PriorSeconds/1e-4+50000+1.83e-5*1e6) + 1e-4; !near(sum/101, want, 1e-9) {
		t.Errorf("speeds read %g, want %g", sum/101, want)
	}
}
