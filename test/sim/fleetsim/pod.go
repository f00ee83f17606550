package fleetsim

import (
	"slices"

	"github.com/kvrouter/kvrouter/router/fleet"
)

// seq is one request on its pod.
type seq struct {
	req      *Request
	pod      int
	sent     float64 // when the client sent it
	finish   float64 // when the last output token came out
	ended    float64 // when it finished or the client canceled it
	aborted  bool    // the client canceled it; its pod drops it at its next step
	blocks   []int32 // the KV blocks it holds, in token order
	computed int     // tokens whose KV is computed
	target   int     // tokens to compute before the next token: the prompt, or more after a preemption
	out      int     // output tokens produced
	sched    int     // tokens scheduled in the current step
	hit      int     // prompt blocks found cached when first admitted; -1 before
	admitted float64 // when it was first admitted (vLLM's scheduled time), if hit >= 0
	first    float64 // when the first output token came out; -1 before
	// prefill is the seq of the request's prompt on its prefill pod; nil
	// when its pod computes the prompt itself.
	prefill *seq
	// prefillOnly marks a prefill pod's seq: it ends with its first token,
	// as llm-d's sidecar asks the prefill pod for one token.
	prefillOnly bool
	// remote marks a decode pod's seq whose prompt a prefill pod computed:
	// admitted, it waits for the KV transfer rather than computing.
	remote bool
	// pulled is the tokens of KV its admission asked the prefill pod for,
	// transfer the seconds they take to arrive.
	pulled   int
	transfer float64
}

// outputs is how many output tokens s produces on its pod.
func (s *seq) outputs() int {
	if s.prefillOnly {
		return 1
	}
	return s.req.Output
}

// hashAt is the hash of the seq's block k: the prompt's vLLM hash, or for
// blocks that hold output tokens a hash no other request shares.
func (s *seq) hashAt(k int) uint64 {
	if k < len(s.req.Hashes) {
		return s.req.Hashes[k]
	}
	return mix(uint64(s.req.ID)<<24 | uint64(k) | 1<<62)
}

// pod is one simulated vLLM server: its KV cache and its scheduler's
// queues. Waiting is FIFO; running is in admission order.
type pod struct {
	cfg     *Config
	cache   *cache
	waiting []*seq
	running []*seq
	step    []*seq // scheduled in the step under way
	busy    bool
	pulling []*seq   // admitted remote seqs whose KV is on its way, in admission order
	pulls   []*seq   // of them, admitted by the last schedule: their transfers start
	preempt int      // preemptions so far
	hashes  []uint64 // hashesOf's scratch
	aborts  int      // requests canceled since the last purge
	speed   float64  // Config.Speeds: its steps take 1/speed as long
	now     float64  // the sim's time when it schedules a step
	// counters are vLLM's prefill counters, as its /metrics shows them.
	counters fleet.Counters
}

func newPod(cfg *Config, speed float64) *pod {
	p := &pod{cfg: cfg, cache: newCache(cfg.Blocks), speed: speed}
	p.counters.Has = fleet.HasPromptTokens | fleet.HasCacheQueries | fleet.HasCacheHits | fleet.HasPrefillSeconds | fleet.HasPrefills
	return p
}

func (p *pod) blocksFor(tokens int) int { return (tokens + p.cfg.BlockSize - 1) / p.cfg.BlockSize }

// schedule picks the next step's work, allocating its blocks, and returns
// the step's duration in seconds; false when there is nothing to do.
func (p *pod) schedule() (float64, bool) {
	p.purge()
	budget := p.cfg.StepTokens
	p.step = p.step[:0]
	decodes, ctx, prefill := 0, 0, 0.0
	preempted := false
	for i := 0; i < len(p.running) && budget > 0; i++ {
		s := p.running[i]
		n := 1
		if s.computed < s.target {
			n = min(s.target-s.computed, budget)
		}
		need := p.blocksFor(s.computed+n) - len(s.blocks)
		for need > p.cache.free && len(p.running) > i {
			p.preemptLast()
			preempted = true
		}
		if len(p.running) <= i { // s itself was preempted
			break
		}
		s.blocks, _ = p.cache.allocate(s.blocks, need)
		p.commit(s, n)
		if s.computed < s.target {
			prefill += p.cfg.prefillSeconds(s.computed, n)
		} else {
			decodes++
			ctx += s.computed + 1
		}
		budget -= n
	}
	if !preempted {
		prefill += p.admit(budget)
	}
	if len(p.step) == 0 {
		return 0, false
	}
	return (p.cfg.StepOverhead.Seconds() + p.cfg.decodeSeconds(decodes, ctx) + prefill) / p.speed, true
}

// admit moves waiting requests into the running batch while the budget,
// the batch size and free blocks allow, and returns their prefill cost.
func (p *pod) admit(budget int) float64 {
	cost := 0.0
	bs := p.cfg.BlockSize
	for len(p.waiting) > 0 && len(p.running)+len(p.pulling) < p.cfg.MaxRunning && budget > 0 {
		s := p.waiting[0]
		hs := p.hashesOf(s)
		h := p.cache.hits(hs)
		n := min(s.target-h*bs, budget)
		if s.remote {
			n = s.target - h*bs // every block the prompt lacks here, filled by the transfer
		}
		need := p.blocksFor(h*bs+n) - h
		reclaimed := 0 // cached hits that sit on the free queue
		for _, x := range hs[:h] {
			if p.cache.blocks[p.cache.byHash[x]].ref == 0 {
				reclaimed++
			}
		}
		if need+reclaimed > p.cache.free {
			break
		}
		s.blocks = p.cache.acquire(s.blocks[:0], hs[:h])
		s.blocks, _ = p.cache.allocate(s.blocks, need)
		s.computed = h * bs
		if s.hit < 0 {
			s.hit, s.admitted = h, p.now
		}
		p.waiting = p.waiting[1:]
		if s.remote {
			s.pulled = n
			p.pulling = append(p.pulling, s)
			p.pulls = append(p.pulls, s)
			continue
		}
		// vLLM counts a prefix-cache query of the tokens to compute at
		// each admission (again after a preemption), in tokens.
		p.counters.CacheQueries += float64(s.target)
		p.counters.CacheHits += float64(h * bs)
		p.running = append(p.running, s)
		p.commit(s, n)
		cost += p.cfg.prefillSeconds(s.computed, n)
		budget -= n
	}
	return cost
}

// hashesOf is the hashes of s's full blocks that a cache hit may cover:
// vLLM hashes a request's blocks as they fill, output tokens too, so a
// preempted request finds its cached prompt and output blocks when it is
// admitted again; it recomputes at least the last token.
func (p *pod) hashesOf(s *seq) []uint64 {
	n := (s.target - 1) / p.cfg.BlockSize
	if n <= len(s.req.Hashes) {
		return s.req.Hashes[:n]
	}
	p.hashes = append(p.hashes[:0], s.req.Hashes...)
	for k := len(s.req.Hashes); k < n; k++ {
		p.hashes = append(p.hashes, s.hashAt(k))
	}
	return p.hashes
}

// purge drops canceled requests, freeing their blocks, as vLLM's
// scheduler does with aborted requests between steps.
func (p *pod) purge() {
	if p.aborts == 0 {
		return
	}
	p.aborts = 0
	p.running = slices.DeleteFunc(p.running, func(s *seq) bool {
		if s.aborted {
			p.cache.release(s.blocks)
			s.blocks = nil
		}
		return s.aborted
	})
	p.waiting = slices.DeleteFunc(p.waiting, func(s *seq) bool { return s.aborted })
	p.pulling = slices.DeleteFunc(p.pulling, func(s *seq) bool {
		if s.aborted {
			p.cache.release(s.blocks)
			s.blocks = nil
		}
		return s.aborted
	})
}

// commit schedules n more tokens of s in this step and caches the blocks
// they fill.
func (p *pod) commit(s *seq, n int) {
	bs := p.cfg.BlockSize
	for k := s.computed / bs; (k+1)*bs <= s.computed+n; k++ {
		p.cache.commit(s.blocks[k], s.hashAt(k))
	}
	s.sched = n
	p.step = append(p.step, s)
}

// preemptLast sends the newest running request back to the front of the
// waiting queue, freeing its blocks: it will be recomputed.
func (p *pod) preemptLast() {
	s := p.running[len(p.running)-1]
	p.running = p.running[:len(p.running)-1]
	p.cache.release(s.blocks)
	s.blocks = s.blocks[:0]
	s.computed = 0
	if s.out > 0 {
		s.target = s.req.Prompt + s.out
	}
	p.waiting = slices.Insert(p.waiting, 0, s)
	p.preempt++
}

// finishStep applies the step's progress: started gets each request whose
// first token came out, finished each request that ended (its blocks
// already released).
func (p *pod) finishStep(now float64, started, finished func(*seq)) {
	done := false
	for _, s := range p.step {
		if s.aborted { // its step's blocks stay cached; purge frees them
			s.sched = 0
			continue
		}
		wasPrefill := s.computed < s.target
		s.computed += s.sched
		s.sched = 0
		if wasPrefill && s.computed < s.target {
			continue // more chunks to go
		}
		s.out++
		if s.first < 0 {
			s.first = now
			if !s.remote { // its prefill, from its first schedule: vLLM's prompt and prefill-time counters
				p.counters.PromptTokens += float64(s.req.Prompt)
				p.counters.PrefillSeconds += now - s.admitted
				p.counters.Prefills++
			}
			started(s)
		}
		if s.out >= s.outputs() {
			p.cache.release(s.blocks)
			s.blocks = nil
			s.target = -1 // marks it for removal below
			finished(s)
			done = true
		}
	}
	p.step = p.step[:0]
	if done {
		p.running = slices.DeleteFunc(p.running, func(s *seq) bool { return s.target < 0 })
	}
}

// pendingDecode is the decode load of the running batch: how many
// sequences decode and their summed context.
func (p *pod) pendingDecode() (seqs, ctx int) {
	for _, s := range p.running {
		if s.computed >= s.target {
			seqs++
			ctx += s.computed
		}
	}
	return seqs, ctx
}

// received ends remote seq s's KV transfer: its blocks now hold the
// prompt's KV but for the last token, which its next step computes for
// the first output token (vLLM recomputes the last token of a prompt whose
// KV it loaded whole); its full prompt blocks are cached, as the NIXL
// connector's decode side holds them. False when s left the pod meanwhile
// (the client canceled it).
func (p *pod) received(s *seq) bool {
	k := slices.Index(p.pulling, s)
	if k < 0 {
		return false
	}
	p.pulling = slices.Delete(p.pulling, k, k+1)
	if s.aborted {
		p.cache.release(s.blocks)
		s.blocks = nil
		return false
	}
	bs := p.cfg.BlockSize
	for b := s.computed / bs; (b+1)*bs <= s.target-1; b++ {
		p.cache.commit(s.blocks[b], s.hashAt(b))
	}
	s.computed, s.remote = s.target-1, false
	p.running = append(p.running, s)
	return true
}
