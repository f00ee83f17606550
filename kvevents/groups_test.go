package kvevents

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/kvevents/wire"
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
// sink_full_attention, or no kind at all) are indexed block for block, and
// their removals apply; the other kinds are skipped and counted.
func TestApplyPrefixKinds(t *testing.T) {
	tests := []struct {
		kind    string
		indexed bool
		label   string
	}{
		{"", true, ""},
		{"full_attention", true, ""},
		{"mla_attention", true, ""},
		{"sink_full_attention", true, ""},
		{"sliding_window", false, "sliding_window"},
		{"sliding_window_mla", false, "sliding_window_mla"},
		{"chunked_local_attention", false, "chunked_local_attention"},
		{"mamba", false, "mamba"},
		{"cross_attention", false, "cross_attention"},
		{"unknown", false, "unknown"},
		{"linear_attention_of_tomorrow", false, "other"},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			f := newApplyFixture(t)
			ev := grouped(stored(vecPlain, nil, u32s(0, 48), 16), 0, tc.kind, 0)
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
			if gs := f.a.groups.byIndex; gs[0].Kind != tc.kind || gs[0].Indexed != tc.indexed {
				t.Errorf("group 0 = %+v, want kind %q indexed %v", gs[0], tc.kind, tc.indexed)
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
		{[]wire.Event{full, window}, 3},
		{[]wire.Event{removedIn(1, vecPlain[0], vecPlain[1])}, 3}, // out of the window
		{[]wire.Event{removedIn(2, vecPlain[2])}, 3},              // a group never named
		{[]wire.Event{removedIn(0, vecPlain[2])}, 2},              // full attention evicts for real
	}
	for i, s := range steps {
		if err := f.a.apply(&wire.Batch{Events: s.events}); err != nil {
			t.Fatal(err)
		}
		if got := f.idx.PodEntries(f.id); got != s.want {
			t.Errorf("after step %d: PodEntries = %d, want %d", i, got, s.want)
		}
	}
	for label, want := range map[string]float64{"sliding_window": 2, "unseen": 1} {
		if got := testutil.ToFloat64(f.m.groupSkipped[slices.Index(skipLabels[:], label)]); got != want {
			t.Errorf("group_skipped_events_total{kind=%q} = %v, want %v", label, got, want)
		}
	}
	want := []Group{{Index: 0, Kind: "full_attention", Indexed: true}, {Index: 1, Kind: "sliding_window", SlidingWindow: 32}}
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
