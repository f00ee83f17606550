package fleetsim

// Approximate configures the approximate prefix policy, the Gateway API
// Inference Extension's prefix-cache scorer with load scorers.
type Approximate struct {
	// LRUBlocks is each pod's remembered blocks at a pod of
	// ReferenceBlocks GPU blocks; it is scaled to the simulated pods'
	// Blocks, or not at all where ReferenceBlocks is 0. Defaults 31,250
	// and 19,208 (the llm-d run's pods: 307,328 tokens).
	LRUBlocks, ReferenceBlocks int
	// MaxBlocks is how many leading blocks of a prompt are hashed and
	// matched. Default 256.
	MaxBlocks int
	// Weights of the prefix, queue and KV-utilization scorers. Defaults
	// 1, 1, 1: the published llm-d run's "estimated" scheduler, the
	// inference gateway's default configuration.
	PrefixWeight, QueueWeight, KVWeight float64
}

// DefaultApproximate returns the defaults documented on Approximate.
func DefaultApproximate() Approximate {
	return Approximate{LRUBlocks: 31_250, ReferenceBlocks: 19_208, MaxBlocks: 256, PrefixWeight: 1, QueueWeight: 1, KVWeight: 1}
}

// OverloadApproximate returns the approximate scheduler of llm-d's
// cache-overload runs: their configuration set lruCapacityPerServer to
// 31,250 on pods of ~40k tokens, so each pod's LRU is 31,250 blocks, not
// scaled to the pods' caches.
func OverloadApproximate() Approximate {
	a := DefaultApproximate()
	a.ReferenceBlocks = 0
	return a
}

// approximate guesses where prefixes are cached from its own decisions
// only: it hashes a prompt's characters in blocks (4 characters per token,
// so a block of 64 characters is a block of 16 tokens) and remembers, per
// pod, the blocks of the requests it sent there in an LRU that knows
// nothing of the pod's real evictions.
type approximate struct {
	quiet
	s      *Sim
	cfg    Approximate
	lru    []*lru
	scores []float64
}

func newApproximate(s *Sim, cfg Approximate) *approximate {
	p := &approximate{s: s, cfg: cfg}
	n := cfg.LRUBlocks
	if cfg.ReferenceBlocks > 0 {
		n = int(float64(cfg.LRUBlocks)*float64(s.Config().Blocks)/float64(cfg.ReferenceBlocks) + 0.5)
	}
	n = max(n, 1)
	for range s.Pods() {
		p.lru = append(p.lru, newLRU(n))
	}
	return p
}

// charHash stands for the hash of a block's characters: a function of the
// prefix, like vLLM's hash, but a different one.
func charHash(h uint64) uint64 { return mix(h ^ 0xc4a5) }

func (p *approximate) Pick(r *Request) int {
	hs := r.Hashes[:min(len(r.Hashes), p.cfg.MaxBlocks)]
	p.scores = append(p.scores[:0], make([]float64, p.s.Pods())...)
	if len(hs) > 0 {
		for i, l := range p.lru {
			n := 0
			for n < len(hs) && l.has(charHash(hs[n])) {
				n++
			}
			p.scores[i] = p.cfg.PrefixWeight * float64(n) / float64(len(hs))
		}
	}
	loadScores(p.scores, p.s.Metrics(), p.cfg.QueueWeight, p.cfg.KVWeight)
	i := argmax(p.s, p.scores)
	for _, h := range hs {
		p.lru[i].add(charHash(h))
	}
	return i
}

// lru is a set of hashes of bounded size, least recently added or touched
// dropped first.
type lru struct {
	at         map[uint64]int32
	keys       []uint64
	prev, next []int32
	head, tail int32 // head: oldest
}

func newLRU(n int) *lru {
	return &lru{at: make(map[uint64]int32, n), keys: make([]uint64, 0, n), prev: make([]int32, 0, n), next: make([]int32, 0, n), head: none, tail: none}
}

func (l *lru) has(h uint64) bool {
	_, ok := l.at[h]
	return ok
}

func (l *lru) unlink(i int32) {
	if l.prev[i] != none {
		l.next[l.prev[i]] = l.next[i]
	} else {
		l.head = l.next[i]
	}
	if l.next[i] != none {
		l.prev[l.next[i]] = l.prev[i]
	} else {
		l.tail = l.prev[i]
	}
}

func (l *lru) pushBack(i int32) {
	l.prev[i], l.next[i] = l.tail, none
	if l.tail != none {
		l.next[l.tail] = i
	} else {
		l.head = i
	}
	l.tail = i
}

// add inserts h as the most recent, dropping the oldest when full.
func (l *lru) add(h uint64) {
	if i, ok := l.at[h]; ok {
		l.unlink(i)
		l.pushBack(i)
		return
	}
	var i int32
	if len(l.keys) < cap(l.keys) {
		i = int32(len(l.keys))
		l.keys, l.prev, l.next = append(l.keys, h), append(l.prev, none), append(l.next, none)
	} else {
		i = l.head
		l.unlink(i)
		delete(l.at, l.keys[i])
		l.keys[i] = h
	}
	l.at[h] = i
	l.pushBack(i)
}
