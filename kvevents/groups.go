package kvevents

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/kvrouter/kvrouter/kvevents/wire"
	"github.com/kvrouter/kvrouter/kvindex"
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
// The index holds the groups whose blocks a later request can reuse, each
// the way vLLM's manager of its kind reuses them. In vLLM's
// vllm/v1/core/single_type_kv_cache_manager.py (spec_manager_map on its
// main branch, November 2026):
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
// The full-attention kinds, and events without a kind (releases before
// it, whose models have one group), are held under the block hashes
// themselves, as the one group of most models. Sliding-window and Mamba
// groups are held under kvindex.GroupKey of the hash and the group's index,
// and the pod's layout (kvindex.Index.SetGroups) has the index price each
// match by the prefix every group serves (kvindex/groups.go). A group the
// index cannot price refuses the pod's layout, loudly (a WARN, the
// group's refused reason in /debug/pods, its events counted as skipped):
// a chunked-local group (the events do not carry its chunk size), a kind
// kvrouter does not know, a group whose blocks are not kvrouter's block
// size (vLLM's hash_block_size below a group's block size); the pod is
// then priced by its full-attention blocks alone. So is a pod whose own
// hashes failed verification: its full-attention blocks are rekeyed from
// their token ids, which the other groups' events do not carry in full.
// Cross-attention and encoder-only groups never serve a cached prefix:
// their events are skipped.
var groupKinds = map[string]groupKind{
	"":                        {hold: holdRaw, kind: kvindex.GroupFull},
	"full_attention":          {hold: holdRaw, kind: kvindex.GroupFull},
	"mla_attention":           {hold: holdRaw, kind: kvindex.GroupFull},
	"sink_full_attention":     {hold: holdRaw, kind: kvindex.GroupFull},
	"sliding_window":          {hold: holdKeyed, kind: kvindex.GroupSlidingWindow},
	"sliding_window_mla":      {hold: holdKeyed, kind: kvindex.GroupSlidingWindow},
	"mamba":                   {hold: holdKeyed, kind: kvindex.GroupMamba},
	"chunked_local_attention": {refused: "its chunk size is not in the events"},
	"cross_attention":         {},
	"encoder_only_attention":  {},
}

type groupKind struct {
	hold    hold
	kind    kvindex.GroupKind
	refused string // why the kind's groups cannot be priced
}

// hold is how the index holds a group's blocks.
type hold uint8

const (
	holdNone  hold = iota // not at all
	holdRaw               // under the block hashes
	holdKeyed             // under kvindex.GroupKey(hash, group index)
)

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
	// BlockSize is the group's block_size, 0 when its events send none.
	BlockSize int `json:"block_size,omitempty"`
	// Indexed is true when the group's blocks are in the index.
	Indexed bool `json:"indexed"`
	// Refused says why the index cannot price the group, and so prices
	// the pod by its full-attention blocks alone; "" when it can.
	Refused string `json:"refused,omitempty"`
}

// hold is how the index holds the group's blocks.
func (gr Group) hold() hold {
	if !gr.Indexed {
		return holdNone
	}
	return groupKinds[gr.Kind].hold
}

// groups is what one pod's events taught about its KV-cache groups. It is
// owned by the pod's applier; onChange publishes each new table.
type groups struct {
	byIndex  map[int]Group
	onChange func([]Group)
	log      *slog.Logger
	pod      string
	// blockSize is kvrouter's block size, 0 when it has no hasher: a
	// keyed group's blocks must be of that size.
	blockSize int
	// version counts the changes of byIndex, for the applier's layout.
	version uint64
	// last is the group the last BlockStored named, as recorded (hasLast).
	last    Group
	hasLast bool
}

func newGroups(log *slog.Logger, pod string, blockSize int) *groups {
	return &groups{byIndex: map[int]Group{}, log: log, pod: pod, blockSize: blockSize}
}

// admit reports how e's blocks go to the index (not at all: holdNone) and
// the skipLabels index of its group's kind. A BlockStored is judged by its
// own kind, and teaches its group's kind; a BlockRemoved by the kind its
// group was taught, and not at all (skipUnseen) before that.
func (g *groups) admit(e *wire.Event) (h hold, skip int) {
	switch e.Type {
	case wire.BlockStored:
		gr := g.learn(e)
		return gr.hold(), skipLabel(gr.Kind)
	case wire.BlockRemoved:
		gr, known := g.byIndex[e.GroupIdx]
		if !known {
			return holdNone, skipUnseen
		}
		return gr.hold(), skipLabel(gr.Kind)
	default:
		return holdRaw, 0 // AllBlocksCleared: every group
	}
}

// judge is the Group a BlockStored event describes, and whether and how
// its blocks are held.
func (g *groups) judge(e *wire.Event) Group {
	k, known := groupKinds[e.SpecKind]
	gr := Group{Index: e.GroupIdx, Kind: e.SpecKind, SlidingWindow: e.SlidingWindow, BlockSize: e.BlockSize}
	switch {
	case !known:
		gr.Refused = "kvrouter does not know this kind"
	case k.refused != "":
		gr.Refused = k.refused
	case k.hold != holdKeyed:
	case g.blockSize == 0:
		gr.Refused = "kvrouter's block size is not known (no hasher)"
	case e.BlockSize != 0 && e.BlockSize != g.blockSize:
		gr.Refused = fmt.Sprintf("its blocks hold %d tokens, kvrouter's %d", e.BlockSize, g.blockSize)
	case k.kind == kvindex.GroupSlidingWindow && e.SlidingWindow < 1:
		gr.Refused = "its events carry no sliding window"
	}
	gr.Indexed = k.hold != holdNone && gr.Refused == ""
	return gr
}

// learn records the group of a BlockStored event and returns it.
func (g *groups) learn(e *wire.Event) Group {
	if l := g.last; g.hasLast && l.Index == e.GroupIdx && l.Kind == e.SpecKind && l.SlidingWindow == e.SlidingWindow && l.BlockSize == e.BlockSize {
		return l // the group of the event before, as most events are
	}
	gr := g.judge(e)
	old, known := g.byIndex[e.GroupIdx]
	if known && old == gr {
		g.last, g.hasLast = gr, true
		return gr
	}
	if !known && len(g.byIndex) >= maxGroups {
		return gr
	}
	if known && old.Kind != gr.Kind {
		g.log.Warn("kvevents: a KV-cache group changed kind", "pod", g.pod, "group", gr.Index,
			"kind", old.Kind, "new_kind", gr.Kind)
	}
	if gr.Refused != "" && (!known || old.Refused != gr.Refused) {
		g.log.Warn("kvevents: a KV-cache group cannot be priced: the pod is priced by its full-attention blocks alone",
			"pod", g.pod, "group", gr.Index, "kind", gr.Kind, "reason", gr.Refused)
	}
	g.byIndex[e.GroupIdx] = gr
	g.last, g.hasLast = gr, true
	g.publish()
	return gr
}

// layout is the pod's groups as the index prices them: nil when a group
// is refused, or when every group is held as full attention.
func (g *groups) layout() []kvindex.Group {
	var out []kvindex.Group
	keyed := false
	for _, gr := range g.byIndex {
		switch {
		case gr.Refused != "":
			return nil
		case !gr.Indexed:
			continue
		}
		k := groupKinds[gr.Kind]
		keyed = keyed || k.hold == holdKeyed
		out = append(out, kvindex.Group{Index: gr.Index, Kind: k.kind, Window: gr.SlidingWindow})
	}
	if !keyed {
		return nil
	}
	return out
}

// reset forgets every group: a restarted publisher may serve another
// model configuration.
func (g *groups) reset() {
	g.hasLast = false
	if len(g.byIndex) == 0 {
		return
	}
	clear(g.byIndex)
	g.publish()
}

func (g *groups) publish() {
	g.version++
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
