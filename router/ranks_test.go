package router

import (
	"slices"
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// TestRouteDPRanks: the ranks of a data-parallel server are candidates of
// their own. A prompt cached on rank 2 goes to rank 2 with its rank header,
// and the fallbacks are only candidates the same header reaches: rank 2 of
// another server; for rank 0 also servers of one rank; for an unranked
// pick, no rank of a server of several.
func TestRouteDPRanks(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.DestinationEndpoints = 4
	for _, p := range []pod.Pod{
		{Name: "e", IP: "10.0.0.5", Port: 8000, Model: "dp", DPSize: 4, Ready: true},
		{Name: "f", IP: "10.0.0.6", Port: 8000, Model: "dp", DPSize: 4, Ready: true},
		{Name: "g", IP: "10.0.0.7", Port: 8000, Model: "dp", Ready: true},
	} {
		for _, c := range pod.Ranks(p) {
			tr.fleet.Upsert(c)
		}
	}
	for _, tc := range []struct {
		on, prompt string
		rank       int
		fallbacks  []string
	}{
		{"e:rank-2", prompt, 2, []string{"10.0.0.6:8000"}},
		{"f", "a second prompt, cached on rank 0 of f", 0, []string{"10.0.0.5:8000", "10.0.0.7:8000"}},
		{"g", "a third prompt, cached on the one-rank server", -1, nil},
	} {
		tr.store(tc.on, tc.prompt, "", "")
		d, err := tr.route("/v1/completions", completion("dp", tc.prompt, ""))
		if err != nil {
			t.Fatal(err)
		}
		rank, ok := d.RankHeader()
		if d.Pod != tc.on || d.DPRank != tc.rank || ok != (tc.rank >= 0) || ok && rank != strconv.Itoa(tc.rank) {
			t.Errorf("cached on %s: decision %s rank %d, header %q %v; want %s rank %d", tc.on, d.Pod, d.DPRank, rank, ok, tc.on, tc.rank)
		}
		got := slices.Sorted(slices.Values(d.Fallbacks))
		if !slices.Equal(got, tc.fallbacks) {
			t.Errorf("cached on %s: fallbacks %v, want %v", tc.on, got, tc.fallbacks)
		}
		for _, fb := range d.Fallbacks {
			if !d.Served(fb) || d.DPRank != tc.rank {
				t.Errorf("cached on %s: served by %s: now %s rank %d, want rank %d kept", tc.on, fb, d.Pod, d.DPRank, tc.rank)
			}
			break
		}
		d.Done()
		if s := tr.scoreOn(completion("dp", tc.prompt, ""), tc.on, "score"); s.DPRank != tc.rank {
			t.Errorf("score of %s: dp_rank %d, want %d", tc.on, s.DPRank, tc.rank)
		}
	}
}
