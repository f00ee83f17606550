package router

import (
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// Score is one candidate's predicted time to first token and its parts.
type Score struct {
	Pod     string `json:"name"`
	Address string `json:"address"`
	DPRank  int    `json:"dp_rank"` // the data-parallel rank the pod is on its server; -1: not a rank of several
	Matched int    `json:"matched_blocks"`
	Tiers   Tiers  `json:"matched_blocks_by_tier"`
	Spec    int    `json:"speculative_blocks"`
	// Expiring is how many of the matched blocks (speculative or on the
	// GPU) the pod will have evicted before the request's turn, priced as
	// uncached: the prompts queued there allocate more than its KV cache
	// holds (expiring).
	Expiring int     `json:"expiring_blocks"`
	Queue    float64 `json:"queue_seconds"`
	Prefill  float64 `json:"prefill_seconds"`
	Cost     float64 `json:"cost_seconds"` // Queue + Prefill × (KV pressure + reuse weight + requests queued on the pod)
	// KVUsage is the pod's KV cache use as last scraped (a fraction),
	// which places a new prefix (Tuning.PlacementTolerance).
	KVUsage float64 `json:"kv_cache_usage"`
	// Speed is the pod's prefill speed Prefill and Queue were priced at:
	// tokens per second at no context, learned from its metrics
	// (fleet.Load.PrefillSecondsPerToken) or the configured prior.
	Speed float64 `json:"prefill_tokens_per_second"`

	work     int64   // the prefill of the prompt tokens the pod does not cache, in tokens at no context: its charge to the pod's queue
	cold     float64 // Cost were nothing of the prompt cached there
	uncached int     // the prompt tokens the pod does not cache (nor will soon)
}

// Tiers is a match per cache tier.
type Tiers struct {
	GPU   int `json:"gpu"`
	CPU   int `json:"cpu"`
	Disk  int `json:"disk"`
	Other int `json:"other"`
}

// costs prices each candidate with the formula of docs/routing.md#the-cost,
// whose names the Score fields and /v1/score's report carry:
//
//	cost_seconds    = queue_seconds + prefill_seconds × (kv_pressure + reuse_weight + W)
//	prefill_seconds = U × (1 + (T − U/2) × a) / speed
//
// U the prompt tokens the pod does not cache (matched blocks weighed by
// tier, expiring ones priced as uncached), T the prompt's tokens, a
// Tuning.PrefillAttentionPerToken, W the requests queued on the pod
// (queueSeconds returns it with queue_seconds); pressure is kv_pressure +
// reuse_weight (weights).
//
// peers, by member (empty without a LoadSharer), is the prefill other
// router replicas routed to each pod and have not seen done: it counts as
// the replica's own. now is the time in unix nanoseconds.
func (r *Router) costs(ms []kvindex.PodMatch, peers []replica.PodLoad, members []*fleet.Member, hashes []uint64, tokens int, pressure float64, now int64, out []Score) []Score {
	out = out[:0]
	bs := float64(r.hasher.BlockSize())
	whole := float64(tokens) * (1 + float64(tokens)/2*r.cfg.Tuning.PrefillAttentionPerToken)
	for i, m := range ms {
		mem := members[i]
		spt := r.PrefillSecondsPerToken(mem.Load)
		var peer replica.PodLoad
		if i < len(peers) {
			peer = peers[i]
		}
		// The expiring tail of the match: speculative blocks first, then
		// those off the GPU (its eviction leaves them), then GPU blocks.
		tail := expiring(mem.Load, peer, m, hashes)
		gpu := m.Tiers[kvindex.TierGPU]
		specLost := min(tail, m.Speculative)
		gpuLost := min(max(tail-m.Speculative-(m.Blocks-m.Speculative-gpu), 0), gpu)
		lost := specLost + gpuLost
		saved := float64(m.Speculative-specLost) * bs // a speculative block is on the GPU soon
		for t, n := range m.Tiers {
			if kvindex.Tier(t) == kvindex.TierGPU {
				n -= gpuLost
			}
			saved += float64(n) * bs * r.cfg.Tuning.TierWeights[t]
		}
		uncached := max(float64(tokens)-saved, 0)
		work := uncached * (1 + (float64(tokens)-uncached/2)*r.cfg.Tuning.PrefillAttentionPerToken)
		queue, behind := r.queueSeconds(mem.Load, peer, spt, now)
		prefill := work * spt
		out = append(out, Score{
			Pod: mem.Pod.Name, Address: mem.Endpoint, DPRank: rankOf(mem), Matched: m.Blocks, Spec: m.Speculative, Expiring: lost,
			Tiers:    Tiers{GPU: m.Tiers[kvindex.TierGPU], CPU: m.Tiers[kvindex.TierCPU], Disk: m.Tiers[kvindex.TierDisk], Other: m.Tiers[kvindex.TierOther]},
			Queue:    queue,
			Prefill:  prefill,
			Cost:     queue + prefill*(pressure+behind),
			Speed:    1 / spt,
			work:     int64(work),
			KVUsage:  float64(mem.Load.KVUsagePermille.Load()) / 1000,
			uncached: int(uncached),
			cold:     queue + whole*spt*(pressure+behind),
		})
	}
	return out
}

// expiring is how many of the blocks m matched on the pod whose load is l
// (hashes their chain, leading) the pod will have evicted before it admits
// the request: the tail of the match from the first such block. A pod's KV cache evicts its least recently used blocks
// first, and a block is used again when a request that holds it is
// admitted. The prompts queued on the pod allocate their share the pod's
// cache misses (Load.Queued × Load.MissShare, the other replicas' prefill
// with them); while that fits its cache (Load.KVCapacity, from
// vllm:cache_config_info; nothing expires while it is unknown), every
// matched block is still there at the request's turn. Past that, a block
// is only if a request queued there will use it with less than the
// cache's worth of allocations routed after it (SpecLedger.Fresh, on the
// Load.Charged clock); the others, cached now or computed for a request
// queued there, are evicted first. Counted as cached, they drew a cycle of
// prompts larger than the fleet's caches onto the pods each visited last:
// those pods' queues filled with prompts that missed, while others idled.
// The clock and the ledger are this replica's: with several replicas, its
// own claims look fresh for longer than they are, and blocks only another
// replica's queued requests use count as unclaimed.
func expiring(l *fleet.Load, peer replica.PodLoad, m kvindex.PodMatch, hashes []uint64) int {
	c := l.KVCapacity.Load()
	if c <= 0 || m.Blocks == 0 || int64(float64(l.Queued.Load())*l.MissShare())+peer.PrefillTokens < c {
		return 0
	}
	n := min(m.Blocks, len(hashes))
	return n - l.Spec.Fresh(hashes[:n], l.Charged.Load()-c*fleet.ChargedUnit)
}

// PrefillSecondsPerToken is the prefill cost of one token at no context
// the router prices on the pod whose load is l: what its metrics taught
// (Config.LearnPrefillSpeeds), or Config.PrefillTokensPerSecond.
func (r *Router) PrefillSecondsPerToken(l *fleet.Load) float64 {
	if !r.cfg.LearnPrefillSpeeds {
		return r.cfg.secondsPerToken()
	}
	return l.PrefillSecondsPerToken(r.cfg.secondsPerToken(), r.cfg.Tuning.PrefillAttentionPerToken)
}

// LearnedSeconds is the prefill time the pod's speed was learned from
// (fleet.Speed.Busy); 0 while nothing is, or with Config.LearnPrefillSpeeds off.
func (r *Router) LearnedSeconds(l *fleet.Load) float64 {
	if s := l.Speed(); s != nil && r.cfg.LearnPrefillSpeeds {
		return s.Busy
	}
	return 0
}

// KVPressure is how many prefills an uncached prompt token costs with
// weight Tuning.KVPressure on pods whose mean KV usage is u (a fraction):
// 1 + weight × u/(1−u), u at most MaxKVUsage.
func KVPressure(weight, u float64) float64 {
	u = min(max(u, 0), MaxKVUsage)
	return 1 + weight*u/(1-u)
}

// weights is what an uncached prompt token costs on the candidates, in
// prefills, beyond its own: pressure is KVPressure on their mean scraped
// KV usage (Tuning.KVPressure; 1 when off), reuse the recomputation of the
// cached block it evicts, Tuning.ReuseWeight times the mean of their
// fleet.Load.Reuse (the share of a prompt their caches held over recent
// requests). A new block pushes the least recently used one out of a full
// cache, and a workload that reuses what is cached will prefill that block
// again about as often. Where prompts rarely repeat, evicting costs
// nothing and pods are picked by load; where they do (shared system
// prompts, multi-turn chats), a copy of a prefix on a second pod is priced
// with the prefixes it displaces. share is that mean itself, which
// Tuning.PlacementTolerance reads. One pass over the candidates reads all.
func (r *Router) weights(members []*fleet.Member) (pressure, reuse, share float64) {
	pressure = 1
	if len(members) == 0 || (r.cfg.Tuning.KVPressure == 0 && r.cfg.Tuning.ReuseWeight == 0 && r.cfg.Tuning.PlacementTolerance == 0) {
		return pressure, 0, 0
	}
	var permille int64
	sum := 0.0
	for _, m := range members {
		permille += m.Load.KVUsagePermille.Load()
		sum += m.Load.Reuse()
	}
	n := float64(len(members))
	if r.cfg.Tuning.KVPressure != 0 {
		pressure = KVPressure(r.cfg.Tuning.KVPressure, float64(permille)/1000/n)
	}
	return pressure, r.cfg.Tuning.ReuseWeight * sum / n, sum / n
}

// bestShare is the share of the prompt's blocks the best candidate of
// scores caches (or soon will), which a decision folds into the chosen
// pod's reuse mean; -1 for a prompt of no full block.
func bestShare(scores []Score, blocks int) float64 {
	if blocks == 0 {
		return -1
	}
	best := 0
	for _, s := range scores {
		best = max(best, s.Matched+s.Spec)
	}
	return min(float64(best)/float64(blocks), 1)
}

// queue predicts the work queued on a pod ahead of a new request, in
// seconds of the pod's time, and how many requests wait there.
//
// The router's own unprefilled requests count by the prefill it charged
// them: a queue of cache hits is short however long it is. The oldest of
// them has been prefilling since Load.PrefillSince (now is unix
// nanoseconds): of the time since, the share its prefill has of the pod's
// steps, which it shares with the requests running there
// (RunningSecondsPerRequest each, as below), is done, up to its share of
// the charge, while none of the pod's in-flight prefill is another
// replica's: the router cannot tell when the pod began its request behind
// theirs. (Counting the whole charge until the pod answered priced a pod a
// moment from its first token as if it had not begun, and the router
// copied a cached prefix to an idle pod, a cold prefill, rather than wait
// the moment.) With an index that shares the replicas' in-flight prefill,
// the other replicas' (peer) count as the router's own.
// (Counting every waiting request at a flat price made a pod caching a
// group's prefix, with many hits queued, look busier than a pod with none,
// and a decode-saturated fleet spread its groups, prefilling each prefix
// again and evicting other groups' blocks.) The requests the pod reports
// waiting beyond the router's own are another replica's, or ones the
// scrape has not yet seen leave: each counts as the average of the
// router's own requests queued there, with WaitingSecondsPerRequest as a
// prior worth one request, since replicas running the same policy on the
// same traffic queue alike. Every request running or queued there will
// share the steps ahead with this one: each adds its decode,
// RunningSecondsPerRequest. spt is the pod's prefill cost of a token
// (PrefillSecondsPerToken).
func (r *Router) queueSeconds(l *fleet.Load, peer replica.PodLoad, spt float64, now int64) (seconds, waiting float64) {
	own := float64(l.PrefillTokens.Load()) * spt
	if mine := l.Prefilling.Load(); mine > 0 && own > 0 && peer.Prefilling == 0 {
		head := own / float64(mine)
		done := float64(now-l.PrefillSince.Load()) / 1e9
		done *= head / (head + float64(l.Running.Load())*r.cfg.Tuning.RunningSecondsPerRequest)
		own -= min(max(done, 0), head)
	}
	own += float64(peer.PrefillTokens) * spt
	n := l.Prefilling.Load() + peer.Prefilling
	foreign := max(l.Waiting.Load()-n, 0)
	each := (own + r.cfg.Tuning.WaitingSecondsPerRequest) / float64(n+1)
	seconds = own + float64(foreign)*each + float64(l.Running.Load()+n+foreign)*r.cfg.Tuning.RunningSecondsPerRequest
	return seconds, float64(n + foreign)
}
