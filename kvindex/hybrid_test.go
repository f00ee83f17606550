package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// vllmPod is an independent model of one vLLM pod's prefix cache and of its
// hit rule, written from vLLM's own code at commit 00b08dc4, not from the
// index's: BlockPool.get_cached_block (a hash is cached for a list of
// groups when every one of them holds it), the single-type managers'
// find_longest_cache_hit (vllm/v1/core/single_type_kv_cache_manager.py)
// and HybridKVCacheCoordinator.find_longest_cache_hit
// (vllm/v1/core/kv_cache_coordinator.py), for groups of one block size
// without EAGLE.
type vllmPod struct {
	groups []vllmGroup
	cached []map[uint64]int // by group: hash -> physical blocks holding it
}

type vllmGroup struct {
	kind      string // "full_attention", "sliding_window", "mamba"
	window    int    // tokens
	blockSize int
}

func newVLLMPod(groups ...vllmGroup) *vllmPod {
	p := &vllmPod{groups: groups}
	for range groups {
		p.cached = append(p.cached, map[uint64]int{})
	}
	return p
}

func (p *vllmPod) getCachedBlock(h uint64, groupIDs []int) bool {
	for _, g := range groupIDs {
		if p.cached[g][h] == 0 {
			return false
		}
	}
	return true
}

// attentionGroups is verify_and_split_kv_cache_groups: groups of equal
// spec together, in order of first appearance, full attention first.
func (p *vllmPod) attentionGroups() [][]int {
	var out [][]int
	for i, g := range p.groups {
		j := slices.IndexFunc(out, func(ids []int) bool { return p.groups[ids[0]] == g })
		if j < 0 {
			out = append(out, []int{i})
		} else {
			out[j] = append(out[j], i)
		}
	}
	slices.SortStableFunc(out, func(a, b []int) int {
		fa, fb := p.groups[a[0]].kind == "full_attention", p.groups[b[0]].kind == "full_attention"
		switch {
		case fa == fb:
			return 0
		case fa:
			return -1
		}
		return 1
	})
	return out
}

// findLongest is the manager's find_longest_cache_hit; it returns tokens.
func (p *vllmPod) findLongest(hashes []uint64, maxLength int, ids []int) int {
	g := p.groups[ids[0]]
	bs := g.blockSize
	maxBlocks := min(maxLength/bs, len(hashes))
	switch g.kind {
	case "full_attention":
		n := 0
		for n < maxBlocks && p.getCachedBlock(hashes[n], ids) {
			n++
		}
		return n * bs
	case "sliding_window":
		contiguous := (g.window - 1 + bs - 1) / bs
		num := 0
		for i := maxBlocks - 1; i >= 0; i-- {
			if p.getCachedBlock(hashes[i], ids) {
				num++
				if num >= contiguous {
					return (i + num) * bs
				}
			} else {
				num = 0
			}
		}
		return num * bs
	case "mamba":
		for i := maxBlocks - 1; i >= 0; i-- {
			if p.getCachedBlock(hashes[i], ids) {
				return (i + 1) * bs
			}
		}
		return 0
	}
	panic(g.kind)
}

// hit is the coordinator's find_longest_cache_hit, in tokens.
func (p *vllmPod) hit(hashes []uint64, maxCacheHitLength int) int {
	groups := p.attentionGroups()
	if len(groups) == 1 {
		return p.findLongest(hashes, maxCacheHitLength, groups[0])
	}
	hitLength := maxCacheHitLength
	fullHit := -1
	simple := len(groups) == 2 && p.groups[groups[0][0]].kind == "full_attention"
	for {
		cur := hitLength
		for _, ids := range groups {
			if p.groups[ids[0]].kind == "full_attention" && fullHit >= 0 {
				cur = min(cur, fullHit)
				continue
			}
			cur = p.findLongest(hashes, cur, ids)
			if p.groups[ids[0]].kind == "full_attention" {
				fullHit = cur
			}
		}
		if cur >= hitLength {
			break
		}
		hitLength = cur
		if simple {
			break
		}
	}
	return hitLength
}

// hybridRig drives an index and the vLLM model with the same events.
type hybridRig struct {
	t    *testing.T
	x    *Index
	bs   int
	pods []PodID
	vllm []*vllmPod
}

func newHybridRig(t *testing.T, pods int, groups ...vllmGroup) *hybridRig {
	r := &hybridRig{t: t, x: mustNew(t, Config{MaxEntries: 1 << 16, Shards: 4, SpeculativeTTL: time.Minute}, nil), bs: groups[0].blockSize}
	var layout []Group
	for i, g := range groups {
		switch g.kind {
		case "full_attention":
			layout = append(layout, Group{Index: i, Kind: GroupFull})
		case "sliding_window":
			layout = append(layout, Group{Index: i, Kind: GroupSlidingWindow, Window: g.window})
		case "mamba":
			layout = append(layout, Group{Index: i, Kind: GroupMamba})
		}
	}
	for i := range pods {
		id := r.x.AddPod(fmt.Sprint("pod-", i), "m")
		if err := r.x.SetGroups(id, r.bs, layout); err != nil {
			t.Fatal(err)
		}
		r.pods = append(r.pods, id)
		r.vllm = append(r.vllm, newVLLMPod(groups...))
	}
	return r
}

// key is the index key of h in group g, as package kvevents applies it.
func (r *hybridRig) key(pod, g int, h uint64) uint64 {
	if r.vllm[pod].groups[g].kind == "full_attention" {
		return h
	}
	return GroupKey(h, g)
}

func (r *hybridRig) store(pod, g int, hs []uint64) {
	keys := make([]uint64, len(hs))
	for i, h := range hs {
		keys[i] = r.key(pod, g, h)
		r.vllm[pod].cached[g][h]++
	}
	if err := r.x.Stored(r.pods[pod], TierGPU, keys); err != nil {
		r.t.Fatal(err)
	}
}

func (r *hybridRig) remove(pod, g int, hs []uint64) {
	keys := make([]uint64, len(hs))
	for i, h := range hs {
		keys[i] = r.key(pod, g, h)
		if r.vllm[pod].cached[g][h] > 0 {
			r.vllm[pod].cached[g][h]--
		}
	}
	if err := r.x.Removed(r.pods[pod], TierGPU, keys); err != nil {
		r.t.Fatal(err)
	}
}

// check compares every pod's match with the hit vLLM would make.
func (r *hybridRig) check(hashes []uint64, where string) {
	got := r.x.Match("m", hashes, r.pods, nil)
	for i, m := range got {
		want := r.vllm[i].hit(hashes, len(hashes)*r.bs) / r.bs
		if m.Blocks != want || m.Tiers[TierGPU] != want {
			r.t.Fatalf("%s: pod %d: matched %+v, vLLM hits %d blocks", where, i, m, want)
		}
	}
}

// TestHybridAgainstVLLM runs random stores and removals in every group of a
// full + sliding-window, a full + Mamba, and a three-spec model, and holds
// each pod's match to the model's hit after every step.
func TestHybridAgainstVLLM(t *testing.T) {
	const bs = 4
	full := vllmGroup{kind: "full_attention", blockSize: bs}
	models := map[string][]vllmGroup{
		"full+swa":       {full, {kind: "sliding_window", window: 9, blockSize: bs}},
		"swa+full":       {{kind: "sliding_window", window: 5, blockSize: bs}, full},
		"full+2swa":      {full, {kind: "sliding_window", window: 13, blockSize: bs}, {kind: "sliding_window", window: 13, blockSize: bs}},
		"full+mamba":     {full, {kind: "mamba", blockSize: bs}},
		"full+swa+mamba": {full, {kind: "sliding_window", window: 8, blockSize: bs}, {kind: "mamba", blockSize: bs}},
		"swa":            {{kind: "sliding_window", window: 9, blockSize: bs}},
		"swa+mamba":      {{kind: "sliding_window", window: 9, blockSize: bs}, {kind: "mamba", blockSize: bs}},
	}
	for name, groups := range models {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(40) {
				rng := rand.New(rand.NewPCG(seed, 55))
				r := newHybridRig(t, 3, groups...)
				prompts := [][]uint64{randomHashes(rng, 24)}
				prompts = append(prompts, append(slices.Clone(prompts[0][:10]), randomHashes(rng, 14)...))
				for step := range 60 {
					hs := prompts[rng.IntN(len(prompts))]
					pod, g := rng.IntN(3), rng.IntN(len(groups))
					lo := rng.IntN(len(hs))
					hi := lo + 1 + rng.IntN(len(hs)-lo)
					if rng.IntN(3) == 0 {
						r.remove(pod, g, hs[lo:hi])
					} else {
						r.store(pod, g, hs[lo:hi])
					}
					for _, p := range prompts {
						r.check(p, fmt.Sprintf("seed %d step %d", seed, step))
						r.check(p[:rng.IntN(len(p)+1)], fmt.Sprintf("seed %d step %d (cut)", seed, step))
					}
				}
			}
		})
	}
}

// TestHybridTiersAndSpeculation: a match cut short by a sliding window keeps
// the tiers of the blocks it keeps; a block held only speculatively counts
// as held by every group (the request routed there stores them all); a
// pod holding its full-attention blocks and nothing of the window reuses
// nothing.
func TestHybridTiersAndSpeculation(t *testing.T) {
	x := mustNew(t, Config{MaxEntries: 1 << 12, Shards: 4, SpeculativeTTL: time.Minute}, nil)
	hs := randomHashes(rand.New(rand.NewPCG(1, 1)), 10)
	layout := []Group{{Index: 0, Kind: GroupFull}, {Index: 1, Kind: GroupSlidingWindow, Window: 9}} // 2 blocks of 4 tokens
	var pods []PodID
	for i := range 3 {
		pods = append(pods, x.AddPod(fmt.Sprint("pod-", i), "m"))
		if err := x.SetGroups(pods[i], 4, layout); err != nil {
			t.Fatal(err)
		}
	}
	window := func(hs []uint64) []uint64 {
		keys := make([]uint64, len(hs))
		for i, h := range hs {
			keys[i] = GroupKey(h, 1)
		}
		return keys
	}
	mustStore(t, x, pods[0], TierGPU, hs[:5]...)
	mustStore(t, x, pods[0], TierCPU, hs[5:]...)
	mustStore(t, x, pods[0], TierGPU, window(hs[:7])...) // the window's run ends at block 7
	if err := x.Speculate(pods[1], hs); err != nil {
		t.Fatal(err)
	}
	mustStore(t, x, pods[2], TierGPU, hs...)
	got := x.Match("m", hs, pods, nil)
	want := []PodMatch{
		{Pod: pods[0], Blocks: 7, Tiers: [NumTiers]int{5, 2, 0, 0}},
		{Pod: pods[1], Blocks: 10, Speculative: 10},
		{Pod: pods[2]},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Match = %+v, want %+v", got, want)
	}
	// Back to full attention alone: the whole full-attention prefix.
	if err := x.SetGroups(pods[0], 4, nil); err != nil {
		t.Fatal(err)
	}
	if got := x.Match("m", hs, pods[:1], nil)[0]; got.Blocks != 10 || got.Tiers[TierCPU] != 5 {
		t.Errorf("Match without groups = %+v, want 10 blocks, 5 on the CPU", got)
	}
}

// TestSetGroupsRefuses: layouts the index cannot price are errors.
func TestSetGroupsRefuses(t *testing.T) {
	x := mustNew(t, Config{MaxEntries: 1 << 12, Shards: 4}, nil)
	pod := x.AddPod("pod", "m")
	for _, tc := range []struct {
		bs     int
		groups []Group
	}{
		{0, nil},
		{16, []Group{{Index: 1, Kind: GroupSlidingWindow}}},
		{16, []Group{{Index: 1, Kind: GroupKind(9)}}},
	} {
		if err := x.SetGroups(pod, tc.bs, tc.groups); err == nil {
			t.Errorf("SetGroups(%d, %+v) = nil, want an error", tc.bs, tc.groups)
		}
	}
	if err := x.SetGroups(PodID(77), 16, nil); err == nil {
		t.Error("SetGroups of an unknown pod = nil, want an error")
	}
}

// TestPriceGroupsByNamespace: pricing a shared index's matches counts no
// candidate of another model, even one whose layout has no full attention
// (whose hit is read from its groups alone).
func TestPriceGroupsByNamespace(t *testing.T) {
	x := mustNew(t, Config{MaxEntries: 1 << 12, Shards: 4}, nil)
	hs := randomHashes(rand.New(rand.NewPCG(2, 2)), 4)
	var pods []PodID
	for i, ns := range []string{"m", "other"} {
		pods = append(pods, x.AddPod(fmt.Sprint("pod-", i), ns))
		if err := x.SetGroups(pods[i], 4, []Group{{Index: 0, Kind: GroupSlidingWindow, Window: 5}}); err != nil {
			t.Fatal(err)
		}
		keys := make([]uint64, len(hs))
		for j, h := range hs {
			keys[j] = GroupKey(h, 0)
		}
		mustStore(t, x, pods[i], TierGPU, keys...)
	}
	out := []PodMatch{{Pod: pods[0]}, {Pod: pods[1]}}
	x.PriceGroups("m", hs, out, []Spot{{Cand: 9, Block: 0}, {Cand: 0, Block: -1}})
	if out[0].Blocks != 4 || out[1].Blocks != 0 {
		t.Errorf("PriceGroups = %+v, want 4 blocks for the model's pod and none for the other's", out)
	}
}
