package fleetsim

import (
	"math"

	"github.com/kvrouter/kvrouter/router"
)

// oracle reads every pod's real cache and queue: it predicts each pod's
// time to first token for the request from the blocks the pod holds or
// will hold for requests queued there, the uncached prefill queued ahead,
// and the decode load sharing those steps, adds the delay the request's
// prefill imposes on as many requests as are queued there and weighs the
// prefill by the fleet's KV usage (as kvrouter's scoring does, from exact
// usage rather than scrapes), and picks the cheapest, at random among
// those within oracleTies of it.
type oracle struct {
	s       *Sim
	weight  float64            // kvrouter's KVPressure
	queued  []int              // per pod: uncached prompt tokens routed there, not started
	waiting []int              // per pod: requests routed there, not started
	charged []int              // per request: its share of queued
	pending []map[uint64]int32 // per pod: prompt blocks of requests routed there, not started
	scores  []float64
}

func newOracle(s *Sim) *oracle {
	o := &oracle{s: s, weight: router.DefaultConfig().Tuning.KVPressure, queued: make([]int, s.Pods()), waiting: make([]int, s.Pods()), charged: make([]int, len(s.w.Requests))}
	for range s.Pods() {
		o.pending = append(o.pending, map[uint64]int32{})
	}
	return o
}

func (o *oracle) Pick(r *Request) int {
	cfg := o.s.Config()
	bs := cfg.BlockSize
	maxHit := min(len(r.Hashes), (r.Prompt-1)/bs)
	o.scores = o.scores[:0]
	uncached := make([]int, len(o.s.pods))
	pressure := o.pressure()
	for i, p := range o.s.pods {
		hit := 0
		for hit < maxHit && (p.cache.has(r.Hashes[hit]) || o.pending[i][r.Hashes[hit]] > 0) {
			hit++
		}
		uncached[i] = r.Prompt - hit*bs
		tokens := o.queued[i] + uncached[i]
		seqs, ctx := p.pendingDecode()
		steps := math.Ceil(float64(tokens) / float64(cfg.StepTokens))
		own := cfg.prefillSeconds(hit*bs, uncached[i])
		est := (own*(pressure+float64(o.waiting[i])) + float64(o.queued[i])/cfg.PrefillTokensPerSecond +
			steps*(cfg.StepOverhead.Seconds()+cfg.decodeSeconds(seqs, ctx))) / cfg.speed(i)
		o.scores = append(o.scores, est)
	}
	i := cheapest(o.s, o.scores, oracleTies)
	o.queued[i] += uncached[i]
	o.waiting[i]++
	o.charged[r.ID] = uncached[i]
	for _, h := range r.Hashes {
		o.pending[i][h]++
	}
	return i
}

// pressure is kvrouter's KV pressure over the pods' exact KV usage.
func (o *oracle) pressure() float64 {
	u := 0.0
	for _, p := range o.s.pods {
		u += p.cache.usage()
	}
	return router.KVPressure(o.weight, u/float64(len(o.s.pods)))
}

// oracleTies is how close to the cheapest pod's cost another pod's is
// equal to it. Under overload a run's TTFT p90 is a queue that moves by
// ±15% with any different decision, so an oracle that broke only exact
// ties would trace one trajectory of many; breaking the ties of 0.1% at
// random draws one per seed, as kvrouter's tolerance does.
const oracleTies = 0.001

func (o *oracle) Started(r *Request) {
	i := o.s.seqs[r.ID].pod
	o.queued[i] -= o.charged[r.ID]
	o.waiting[i]--
	for _, h := range r.Hashes {
		if o.pending[i][h]--; o.pending[i][h] == 0 {
			delete(o.pending[i], h)
		}
	}
}

func (*oracle) Finished(*Request) {}
