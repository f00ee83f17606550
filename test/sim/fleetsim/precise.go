package fleetsim

import (
	"github.com/kvrouter/kvrouter/kvindex"
)

// Precise configures llm-d's precise prefix-cache scheduler: the
// prefix-cache scorer in cache-tracking mode (the pods' own KV events),
// the KV-cache utilization scorer and the queue scorer, and the
// max-score picker.
type Precise struct {
	// BlockSize is the scorer's block size in tokens, a multiple of the
	// fleet's: a prompt's matched prefix counts in whole blocks of it.
	// Default 64, as every published run set it.
	BlockSize int
	// Weights of the prefix-cache, queue and KV-utilization scorers.
	// Defaults 3, 2, 2: the 73-capacity run's configuration and llm-d's
	// precise-routing guide's. The cache-overload runs used 1, 1, 1
	// (OverloadPrecise).
	PrefixWeight, QueueWeight, KVWeight float64
}

// DefaultPrecise returns the defaults documented on Precise.
func DefaultPrecise() Precise {
	return Precise{BlockSize: 64, PrefixWeight: 3, QueueWeight: 2, KVWeight: 2}
}

// OverloadPrecise returns the cache-overload runs' precise scheduler:
// block size 64, weights 1:1:1.
func OverloadPrecise() Precise {
	return Precise{BlockSize: 64, PrefixWeight: 1, QueueWeight: 1, KVWeight: 1}
}

// precise is llm-d's precise scheduler over kvrouter's exact view of the
// pods' caches: the same event-fed index the kvrouter policy reads, without
// kvrouter's speculative entries (llm-d's indexer holds only what the
// events said). Its prefix score is the longest run of leading blocks each
// pod holds, in the scorer's blocks, min-max normalized over the pods that
// hold at least one (1 for all of them when they tie; 0 for the others),
// as llm-d's scorer normalizes the indexer's scores. Queue and KV use come
// from the last metrics scrape (loadScores); the highest total wins, ties
// at random.
type precise struct {
	quiet
	*eventIndex
	s       *Sim
	cfg     Precise
	matches []kvindex.PodMatch
	blocks  []int
	scores  []float64
}

func newPrecise(s *Sim, cfg Precise) (*precise, error) {
	ei, err := newEventIndex(s)
	if err != nil {
		return nil, err
	}
	return &precise{eventIndex: ei, s: s, cfg: cfg}, nil
}

func (p *precise) Pick(r *Request) int {
	p.scores = append(p.scores[:0], make([]float64, p.s.Pods())...)
	p.matches = p.index.Match(simModel, r.Hashes, p.pods, p.matches)
	per := max(p.cfg.BlockSize/p.s.Config().BlockSize, 1)
	p.blocks = p.blocks[:0]
	for _, m := range p.matches {
		p.blocks = append(p.blocks, m.Blocks/per)
	}
	prefixScores(p.scores, p.blocks, p.cfg.PrefixWeight)
	loadScores(p.scores, p.s.Metrics(), p.cfg.QueueWeight, p.cfg.KVWeight)
	return argmax(p.s, p.scores)
}

// prefixScores adds llm-d's precise prefix-cache score, with its weight,
// to scores: each pod's matched blocks min-max normalized over the pods
// that match at least one (1 for all of them when they tie), 0 for the
// others.
func prefixScores(scores []float64, blocks []int, weight float64) {
	lo, hi, held := 0, 0, false
	for _, n := range blocks {
		if n > 0 {
			if !held {
				lo, hi, held = n, n, true
			}
			lo, hi = min(lo, n), max(hi, n)
		}
	}
	for i, n := range blocks {
		switch {
		case n == 0:
		case hi == lo:
			scores[i] += weight
		default:
			scores[i] += weight * float64(n-lo) / float64(hi-lo)
		}
	}
}

// PreciseShifted names llm-d's precise scheduler with its metrics scraped
// half a scrape interval later than the fleet's other policies' (50 ms by
// default): the same scheduler, its decisions made on other moments' queue
// and KV figures. Compared with llm-d-precise, it measures how far one
// stage's TTFT p90 moves between two runs of one policy that differ in
// nothing a policy should be judged by.
const PreciseShifted = "llm-d-precise-shifted"

// shifted is llm-d-precise scraped half an interval late (PreciseShifted).
type shifted struct{ *precise }

func (shifted) scrapePhase() float64 { return 0.5 }
