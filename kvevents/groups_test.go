package kvevents

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/kvevents/wire"
	"github.com/kvrouter/kvrouter/kvindex"
)

// grouped returns e in KV-cache group idx of kind (and window).
func grouped(e wire.Event, idx int, kind string, window int) wire.Event {
	e.GroupIdx, e.SpecKind, e.SlidingWindow = idx, kind, window
	return e
}

func removedIn(idx int, hashes ...uint64) wire.Event {
	return wire.Event{Type: wire.BlockRemoved, Hashes: hashes, GroupIdx: idx}
}

// TestApplyPrefixKinds: the groups vLLM reuses as full attention does
// (full_attention, mla_attention as DeepSeek and Kimi run it,
// sink_full_attention, or no kind at all) are indexed block for block under
// their hashes, sliding-window and Mamba groups under their group's keys,
// and their removals apply; the kinds the index cannot price are refused,
// and those that serve no prefix skipped, their events counted.
func TestApplyPrefixKinds(t *testing.T) {
	tests := []struct {
		kind    string
		window  int
		indexed bool
		refused bool
		label   string
	}{
		{"", 0, true, false, ""},
		{"full_attention", 0, true, false, ""},
		{"mla_attention", 0, true, false, ""},
		{"sink_full_attention", 0, true, false, ""},
		{"sliding_window", 128, true, false, ""},
		{"sliding_window_mla", 128, true, false, ""},
		{"mamba", 0, true, false, ""},
		{"sliding_window", 0, false, true, "sliding_window"},
		{"chunked_local_attention", 0, false, true, "chunked_local_attention"},
		{"cross_attention", 0, false, false, "cross_attention"},
		{"unknown", 0, false, true, "unknown"},
		{"linear_attention_of_tomorrow", 0, false, true, "other"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.kind, "/", tc.window), func(t *testing.T) {
			f := newApplyFixture(t)
			ev := grouped(stored(vecPlain, nil, u32s(0, 48), 16), 0, tc.kind, tc.window)
			if err := f.a.apply(&wire.Batch{Events: []wire.Event{ev}}); err != nil {
				t.Fatal(err)
			}
			want := 0
			if tc.indexed {
				want = len(vecPlain)
			}
			if got := f.idx.PodEntries(f.id); got != want {
				t.Errorf("PodEntries after a %q store = %d, want %d", tc.kind, got, want)
			}
			if err := f.a.apply(&wire.Batch{Events: []wire.Event{removedIn(0, vecPlain[0])}}); err != nil {
				t.Fatal(err)
			}
			if tc.indexed {
				want--
			}
			if got := f.idx.PodEntries(f.id); got != want {
				t.Errorf("PodEntries after a %q removal = %d, want %d", tc.kind, got, want)
			}
			var skipped float64
			for k, c := range f.m.groupSkipped {
				got := testutil.ToFloat64(c)
				skipped += got
				if skipLabels[k] == tc.label && got != 2 {
					t.Errorf("group_skipped_events_total{kind=%q} = %v, want 2 (the store and the removal)", tc.label, got)
				}
			}
			if tc.indexed && skipped != 0 {
				t.Errorf("group_skipped_events_total = %v for an indexed kind, want 0", skipped)
			}
			if gs := f.a.groups.byIndex; gs[0].Kind != tc.kind || gs[0].Indexed != tc.indexed || (gs[0].Refused != "") != tc.refused {
				t.Errorf("group 0 = %+v, want kind %q indexed %v refused %v", gs[0], tc.kind, tc.indexed, tc.refused)
			}
		})
	}
}

// TestApplyGroupsKeepToThemselves plays a model with full-attention and
// sliding-window layers (gpt-oss, Gemma): every block is stored in both
// groups under the same hash, and the window's group frees its blocks as
// they leave the window. The full-attention entries stay whole; a removal
// in a group no store has named is counted, not applied.
func TestApplyGroupsKeepToThemselves(t *testing.T) {
	f := newApplyFixture(t)
	var published [][]Group
	f.a.groups.onChange = func(gs []Group) { published = append(published, gs) }
	full := grouped(stored(vecPlain, nil, u32s(0, 48), 16), 0, "full_attention", 0)
	window := grouped(stored(vecPlain, nil, u32s(0, 48), 16), 1, "sliding_window", 32)
	steps := []struct {
		events []wire.Event
		want   int
	}{
		{[]wire.Event{full, window}, 6},
		{[]wire.Event{removedIn(1, vecPlain[0], vecPlain[1])}, 4}, // out of the window
		{[]wire.Event{removedIn(2, vecPlain[2])}, 4},              // a group never named
		{[]wire.Event{removedIn(0, vecPlain[2])}, 3},              // full attention evicts for real
	}
	for i, s := range steps {
		if err := f.a.apply(&wire.Batch{Events: s.events}); err != nil {
			t.Fatal(err)
		}
		if got := f.idx.PodEntries(f.id); got != s.want {
			t.Errorf("after step %d: PodEntries = %d, want %d", i, got, s.want)
		}
	}
	for _, h := range vecPlain[:2] {
		if !f.idx.Holds(f.id, h) {
			t.Errorf("the full-attention group lost block %x to the window's removals", h)
		}
	}
	if f.idx.Holds(f.id, kvindex.GroupKey(vecPlain[0], 1)) || !f.idx.Holds(f.id, kvindex.GroupKey(vecPlain[2], 1)) {
		t.Error("the sliding-window group's removals did not apply to its own keys alone")
	}
	for label, want := range map[string]float64{"sliding_window": 0, "unseen": 1} {
		if got := testutil.ToFloat64(f.m.groupSkipped[slices.Index(skipLabels[:], label)]); got != want {
			t.Errorf("group_skipped_events_total{kind=%q} = %v, want %v", label, got, want)
		}
	}
	want := []Group{
		{Index: 0, Kind: "full_attention", BlockSize: 16, Indexed: true},
		{Index: 1, Kind: "sliding_window", SlidingWindow: 32, BlockSize: 16, Indexed: true},
	}
	if len(published) != 2 || !slices.Equal(published[1], want) {
		t.Errorf("published group tables %+v, want two, the last %+v", published, want)
	}
	// A restarted publisher may run another configuration: its groups are
	// learned afresh, and until then its removals are unseen.
	if err := f.a.clear(clearRestart, f.a.groups.log, "pod-a"); err != nil {
		t.Fatal(err)
	}
	if last := published[len(published)-1]; len(last) != 0 {
		t.Errorf("groups after a restart = %+v, want none", last)
	}
	if err := f.a.apply(&wire.Batch{Events: []wire.Event{removedIn(0, vecPlain[0])}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(f.m.groupSkipped[skipUnseen]); got != 2 {
		t.Errorf("unseen removals after a restart = %v, want 2", got)
	}
}

// TestApplyHybridLayout: a pod's groups reach the index as its layout, and
// its matches are priced by them; a group the index cannot price (blocks of
// another size) leaves the pod priced by full attention alone.
func TestApplyHybridLayout(t *testing.T) {
	f := newApplyFixture(t)
	full := grouped(stored(vecPlain, nil, u32s(0, 48), 16), 0, "full_attention", 0)
	window := grouped(stored(vecPlain, nil, u32s(0, 48), 16), 1, "sliding_window", 32) // 2 blocks before a hit
	match := func() int {
		return f.idx.Match("model", vecPlain, []kvindex.PodID{f.id}, nil)[0].Blocks
	}
	steps := []struct {
		what   string
		events []wire.Event
		want   int
	}{
		{"both groups hold every block", []wire.Event{full, window}, 3},
		{"the window lost the last two blocks", []wire.Event{removedIn(1, vecPlain[1:]...)}, 1},
		{"a Mamba group of 32-token blocks", []wire.Event{grouped(stored(vecPlain[:1], nil, u32s(0, 32), 32), 2, "mamba", 0)}, 3},
	}
	for _, s := range steps {
		if err := f.a.apply(&wire.Batch{Events: s.events}); err != nil {
			t.Fatal(err)
		}
		if got := match(); got != s.want {
			t.Errorf("%s: matched %d blocks, want %d", s.what, got, s.want)
		}
	}
	if gr := f.a.groups.byIndex[2]; gr.Indexed || gr.Refused != "its blocks hold 32 tokens, kvrouter's 16" {
		t.Errorf("group 2 = %+v, want refused for its block size", gr)
	}
	if !strings.Contains(f.log.String(), "cannot be priced") {
		t.Errorf("no WARN for the refused group in %q", f.log.String())
	}
}
