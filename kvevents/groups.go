package kvevents

import (
	"log/slog"
	"slices"

	"github.com/kvrouter/kvrouter/kvevents/wire"
)

// A model whose layers use several kinds of attention has one KV-cache
// group per kind in vLLM (KVCacheConfig.kv_cache_groups), each run by its
// own manager, and its events say which group they are about: BlockStored
// carries group_idx and the group's kv_cache_spec_kind (from
// get_kv_cache_spec_kind, vllm/v1/kv_cache_interface.py), BlockRemoved only
// group_idx. The same block hash can be stored in several groups, and a
// sliding-window group frees blocks as soon as they leave its window, so
// one group's removals must never touch another group's entries.
//
// The index holds the groups whose blocks a later request reuses from the
// start of its prompt, block after block, the way the index matches them.
// In vLLM's vllm/v1/core/single_type_kv_cache_manager.py (spec_manager_map
// on its main branch, November 2026):
//
//	kind                     manager                    a cached prefix is
//	full_attention           FullAttentionManager       every block from the first
//	mla_attention            FullAttentionManager       (MLAAttentionSpec subclasses FullAttentionSpec)
//	sink_full_attention      SinkFullAttentionManager   as full attention (a subclass; sink blocks aside)
//	sliding_window(_mla)     SlidingWindowManager       the last window's blocks only
//	chunked_local_attention  ChunkedLocalAttentionManager  the current chunk's blocks only
//	mamba                    MambaManager               one state at the hit point
//	cross_attention          CrossAttentionManager      never cached
//
// Events without a kind come from releases before it, whose models have
// one group: they are indexed too. Pricing the other groups (how much of
// a full-attention hit a hybrid model can use) is the router's business;
// the index keeps them out so that their events cannot corrupt it.
var prefixKinds = map[string]bool{
	"":                    true,
	"full_attention":      true,
	"mla_attention":       true,
	"sink_full_attention": true,
}

// skipLabels are the kind label values of skipped events: the kinds vLLM
// reports that the index does not hold, then "other" (a kind kvrouter does
// not know) and "unseen" (a BlockRemoved of a group no BlockStored has
// named yet, whose kind is therefore not known).
var skipLabels = [...]string{
	"sliding_window", "sliding_window_mla", "chunked_local_attention", "mamba",
	"cross_attention", "encoder_only_attention", "unknown", "other", "unseen",
}

const (
	skipOther  = len(skipLabels) - 2
	skipUnseen = len(skipLabels) - 1
)

// skipLabel returns the index in skipLabels of a skipped group's kind.
func skipLabel(kind string) int {
	if i := slices.Index(skipLabels[:skipOther], kind); i >= 0 {
		return i
	}
	return skipOther
}

// maxGroups bounds the groups remembered per pod: vLLM's models have a
// handful. A removal in a group past the bound is counted as unseen.
const maxGroups = 64

// Group is one KV-cache group of a pod, as its BlockStored events describe
// it.
type Group struct {
	Index int `json:"index"`
	// Kind is the group's kv_cache_spec_kind; "" when its events name none.
	Kind string `json:"kind"`
	// SlidingWindow is the window of a sliding-window group, in tokens.
	SlidingWindow int `json:"sliding_window,omitempty"`
	// Indexed is true when the group's blocks are in the index.
	Indexed bool `json:"indexed"`
}

// groups is what one pod's events taught about its KV-cache groups. It is
// owned by the pod's applier; onChange publishes each new table.
type groups struct {
	byIndex  map[int]Group
	onChange func([]Group)
	log      *slog.Logger
	pod      string
}

func newGroups(log *slog.Logger, pod string) *groups {
	return &groups{byIndex: map[int]Group{}, log: log, pod: pod}
}

// admit reports whether e's blocks go to the index. A BlockStored is judged
// by its own kind, and teaches its group's kind; a BlockRemoved by the kind
// its group was taught, and not at all (skip is skipUnseen) before that.
// When admit is false, skip is the skipLabels index to count it under.
func (g *groups) admit(e *wire.Event) (ok bool, skip int) {
	switch e.Type {
	case wire.BlockStored:
		g.learn(e)
		if prefixKinds[e.SpecKind] {
			return true, 0
		}
		return false, skipLabel(e.SpecKind)
	case wire.BlockRemoved:
		gr, known := g.byIndex[e.GroupIdx]
		switch {
		case !known:
			return false, skipUnseen
		case gr.Indexed:
			return true, 0
		default:
			return false, skipLabel(gr.Kind)
		}
	default:
		return true, 0 // AllBlocksCleared: every group
	}
}

// learn records the group of a BlockStored event.
func (g *groups) learn(e *wire.Event) {
	gr := Group{Index: e.GroupIdx, Kind: e.SpecKind, SlidingWindow: e.SlidingWindow, Indexed: prefixKinds[e.SpecKind]}
	old, known := g.byIndex[e.GroupIdx]
	if known && old == gr {
		return
	}
	if !known && len(g.byIndex) >= maxGroups {
		return
	}
	if known {
		g.log.Warn("kvevents: a KV-cache group changed kind", "pod", g.pod, "group", gr.Index,
			"kind", old.Kind, "new_kind", gr.Kind)
	}
	g.byIndex[e.GroupIdx] = gr
	g.publish()
}

// reset forgets every group: a restarted publisher may serve another
// model configuration.
func (g *groups) reset() {
	if len(g.byIndex) == 0 {
		return
	}
	clear(g.byIndex)
	g.publish()
}

func (g *groups) publish() {
	if g.onChange == nil {
		return
	}
	out := make([]Group, 0, len(g.byIndex))
	for _, gr := range g.byIndex {
		out = append(out, gr)
	}
	slices.SortFunc(out, func(a, b Group) int { return a.Index - b.Index })
	g.onChange(out)
}
