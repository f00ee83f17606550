package router

import (
	"fmt"
	"strings"
	"testing"
)

// TestIdleFleetSpreadsHotPrefix: on an idle fleet a burst of requests
// sharing a prefix cached on a queues there until the decode those
// requests will share costs more than prefilling the prefix on another
// pod, so every pod takes some.
func TestIdleFleetSpreadsHotPrefix(t *testing.T) {
	tr := newTestRouter(t)
	system := strings.Repeat("Answer in French. ", 56)[:1000] // 250 blocks of 4
	tr.store("a", system, "", "")
	used := map[string]int{}
	for i := range 100 {
		d, err := tr.route("/v1/completions", completion("llama", fmt.Sprintf("%squestion %d?", system, i), ""))
		if err != nil {
			t.Fatal(err)
		}
		used[d.Pod]++
	}
	if len(used) < 3 || used["a"] < used["b"] || used["a"] < used["c"] {
		t.Fatalf("100 concurrent requests sharing a's prefix went %v, want all three llama pods used, a the most", used)
	}
}

// TestPlace: a request the cheapest pod lacks more than half of places a
// new prefix on the least used KV cache among the pods within
// PlacementTolerance × share of the cheapest, ties at random; it places
// nothing when the cheapest pod caches half of it or more, when the
// prompts of late were never found cached (share 0), or when placement is
// off.
func TestPlace(t *testing.T) {
	cold := []Score{
		{Cost: 1.00, KVUsage: 0.5, uncached: 1000},
		{Cost: 1.10, KVUsage: 0.2, uncached: 1000},
		{Cost: 1.30, KVUsage: 0.1, uncached: 1000}, // outside 1.00 × (1 + 0.2)
		{Cost: 1.15, KVUsage: 0.2, uncached: 1000},
	}
	warm := []Score{
		{Cost: 0.10, KVUsage: 0.9, uncached: 500},
		{Cost: 0.11, KVUsage: 0.1, uncached: 1000},
	}
	tests := []struct {
		name   string
		scores []Score
		ok     func(int) bool
		tol    float64
		share  float64
		want   []int // the pods it may pick; nil: -1
	}{
		{"the least used cache within the window, ties either", cold, nil, 0.2, 1, []int{1, 3}},
		{"the window shrinks with the share", cold, nil, 0.2, 0.5, []int{1}},
		{"only the pods ok allows", cold, func(i int) bool { return i != 1 && i != 3 }, 0.2, 1, []int{0}},
		{"the cheapest caches half: no placement", warm, nil, 0.2, 1, nil},
		{"prompts never found cached lately", cold, nil, 0.2, 0, nil},
		{"placement off", cold, nil, 0, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Tuning.PlacementTolerance = tt.tol
			seen := map[int]bool{}
			for i := range 40 {
				cfg.IntN = func(n int) int { return i % n }
				r := &Router{cfg: cfg}
				got, placed := r.choose(tt.scores, tt.ok, 1000, tt.share)
				if !placed {
					got = -1 // placed nothing
				}
				seen[got] = true
			}
			want := map[int]bool{-1: true}
			if tt.want != nil {
				want = map[int]bool{}
				for _, i := range tt.want {
					want[i] = true
				}
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("place picked %v over 40 tie-breaks, want %v", seen, want)
			}
		})
	}
}

// TestNewPrefixGoesToTheEmptiestCache: on idle pods (equal costs) whose
// caches were found to hold prompts lately, a prompt no pod caches goes to
// the least used KV cache, every time (without placement one of the three
// at random); the group's next request goes where its prefix is.
func TestNewPrefixGoesToTheEmptiestCache(t *testing.T) {
	system := strings.Repeat("Summarize the ticket. ", 46)[:1000] // 250 blocks of 4
	for i := range 10 {
		tr := newTestRouter(t)
		for name, kv := range map[string]int64{"a": 800, "b": 300, "c": 500} {
			l := tr.fleet.Load(name)
			l.KVUsagePermille.Store(kv)
			l.FoldReuse(1, 1)
		}
		d, err := tr.route("/v1/completions", completion("llama", system+"first?", ""))
		if err != nil {
			t.Fatal(err)
		}
		if d.Pod != "b" || d.Reason != ReasonPlacement {
			t.Fatalf("router %d: a new prefix went to %s (%s), want b, the least used cache (placement)", i, d.Pod, d.Reason)
		}
		d.Prefilled()
		d.Done()
		tr.store("c", system, "", "")
		if d, err = tr.route("/v1/completions", completion("llama", system+"second?", "")); err != nil {
			t.Fatal(err)
		}
		if d.Matched < 250 {
			t.Fatalf("router %d: a request of the prefix b and c cache went to %s (matched %d/%d), want one of them", i, d.Pod, d.Matched, d.Total)
		}
	}
}
