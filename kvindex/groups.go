package kvindex

import (
	"fmt"
	"slices"
)

// A hybrid model has one KV-cache group per kind of attention layer, and
// vLLM reuses a cached prefix only as far as every group can serve it. Its
// HybridKVCacheCoordinator (vllm/v1/core/kv_cache_coordinator.py) gathers
// the groups of one spec, puts full attention first and asks each spec in
// turn for its longest hit no longer than the current candidate length,
// until no spec shortens it (one round when there are exactly two specs
// and the first is full attention). Each kind's find_longest_cache_hit
// (vllm/v1/core/single_type_kv_cache_manager.py), both at vLLM commit
// 00b08dc4 (November 2026), for a group whose blocks are the prompt's
// blocks of the hashing block size, without EAGLE:
//
//	full attention   the blocks cached from the first, block after block
//	sliding window   scanning down from the candidate length, the end of the
//	                 first run of cdiv(window-1, block size) cached blocks;
//	                 with no such run, the run of cached blocks from the first
//	mamba            scanning down from the candidate length, the end of the
//	                 first cached block (its state)
//
// A block is cached for a spec when every group of the spec holds it.
// Groups are told apart by their blocks' keys: a full-attention group's are
// the block hashes themselves (the index's one-group keys, shared by every
// full-attention group of a pod), every other group's are GroupKey of the
// hash and the group's index. A pod's layout (SetGroups) says which groups
// it has; a pod without one is priced by full attention alone.
//
// A block a match counts only speculatively (a request routed there and not
// yet stored) is taken as held by every group: the request stores all of
// them.

// GroupKind is how a KV-cache group serves a cached prefix.
type GroupKind uint8

// The kinds of group the index prices.
const (
	// GroupFull serves every block from the first (vLLM's full_attention,
	// mla_attention, sink_full_attention).
	GroupFull GroupKind = iota
	// GroupSlidingWindow serves the blocks covering the window before the
	// hit (sliding_window, sliding_window_mla).
	GroupSlidingWindow
	// GroupMamba serves the state saved at the hit (mamba).
	GroupMamba
)

var groupKindNames = [...]string{"full", "sliding_window", "mamba"}

func (k GroupKind) String() string {
	if int(k) < len(groupKindNames) {
		return groupKindNames[k]
	}
	return "invalid"
}

// Group is one KV-cache group of a pod.
type Group struct {
	// Index is vLLM's group_idx.
	Index int
	Kind  GroupKind
	// Window is a sliding-window group's window, in tokens.
	Window int
}

// GroupKey is the index key of block hash h in the non-full-attention
// group of index group: a bijection of h for each group, so one group's
// blocks never meet another's or the full-attention ones'.
func GroupKey(h uint64, group int) uint64 {
	x := h ^ (uint64(group)+1)*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// layout is a pod's groups as the coordinator sees them: its specs, full
// attention first.
type layout struct {
	full  bool   // the pod has full-attention groups: the first spec
	specs []spec // the other specs, by their first group's index
}

// spec is the groups of one kind (and window) of a layout.
type spec struct {
	kind   GroupKind
	need   int   // sliding window: blocks a hit needs before its end
	groups []int // vLLM group indexes, for GroupKey
}

// newLayout builds the layout of groups for blocks of blockSize tokens;
// nil when the pod has full-attention groups only (or none).
func newLayout(groups []Group, blockSize int) (*layout, error) {
	l := &layout{}
	sorted := slices.Clone(groups)
	slices.SortFunc(sorted, func(a, b Group) int { return a.Index - b.Index })
	for _, g := range sorted {
		switch g.Kind {
		case GroupFull:
			l.full = true
			continue
		case GroupSlidingWindow:
			if g.Window < 1 {
				return nil, fmt.Errorf("kvindex: sliding-window group %d has window %d", g.Index, g.Window)
			}
		case GroupMamba:
			g.Window = 0
		default:
			return nil, fmt.Errorf("kvindex: group %d has kind %d", g.Index, g.Kind)
		}
		need := 0
		if g.Kind == GroupSlidingWindow {
			need = (g.Window - 1 + blockSize - 1) / blockSize
		}
		i := slices.IndexFunc(l.specs, func(s spec) bool { return s.kind == g.Kind && s.need == need })
		if i < 0 {
			l.specs = append(l.specs, spec{kind: g.Kind, need: need})
			i = len(l.specs) - 1
		}
		l.specs[i].groups = append(l.specs[i].groups, g.Index)
	}
	if len(l.specs) == 0 {
		return nil, nil
	}
	return l, nil
}

// maxLayouts bounds the layouts interned: a fleet has one per model
// configuration.
const maxLayouts = 1024

// SetGroups tells the index pod's KV-cache groups, for blocks of blockSize
// tokens: matches then price the pod by the prefix every group can serve.
// nil (or full-attention groups only) prices it by full attention alone.
func (x *Index) SetGroups(pod PodID, blockSize int, groups []Group) error {
	if blockSize < 1 {
		return fmt.Errorf("kvindex: block size %d", blockSize)
	}
	l, err := newLayout(groups, blockSize)
	if err != nil {
		return err
	}
	x.pods.Lock()
	defer x.pods.Unlock()
	if err := x.checkPodLocked(pod); err != nil {
		return err
	}
	if l != nil {
		key := fmt.Sprint(l.full, l.specs)
		if known, ok := x.pods.layouts[key]; ok {
			l = known
		} else if len(x.pods.layouts) < maxLayouts {
			if x.pods.layouts == nil {
				x.pods.layouts = map[string]*layout{}
			}
			x.pods.layouts[key] = l
		}
	}
	x.pods.info[pod.index()].layout = l
	return nil
}

// HasGroups reports whether one of pods has a layout with groups besides
// full attention.
func (x *Index) HasGroups(pods []PodID) bool {
	x.pods.RLock()
	defer x.pods.RUnlock()
	for _, p := range pods {
		if x.checkPodLocked(p) == nil && x.pods.info[p.index()].layout != nil {
			return true
		}
	}
	return false
}
