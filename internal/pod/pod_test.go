package pod

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		pod  Pod
		want string // "" = valid
	}{
		{Pod{Name: "a", IP: "10.0.0.1"}, ""},
		{Pod{Name: "a", IP: "::1", EventPort: 5557, ReplayPort: 5558, DPSize: 8}, ""},
		{Pod{IP: "10.0.0.1"}, "empty name"},
		{Pod{Name: "a", IP: "pod.local"}, "not an IP"},
		{Pod{Name: "a", IP: "10.0.0.1", EventPort: 65535, DPSize: 2}, "out of range"},
		{Pod{Name: "a", IP: "10.0.0.1", DPSize: -1}, "DP size"},
		{Pod{Name: "a", IP: "10.0.0.1", DPRank: 3, DPRanks: 4}, ""},
		{Pod{Name: "a", IP: "10.0.0.1", DPRank: 4, DPRanks: 4}, "DP rank 4 of 4"},
		{Pod{Name: "a", IP: "10.0.0.1", DPRank: 1}, "DP rank 1 of 0"},
	}
	for _, tc := range tests {
		err := tc.pod.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Validate() = %v, want %q", tc.pod, err, tc.want)
		}
	}
}

func TestEqualAndEndpoint(t *testing.T) {
	a := Pod{Name: "a", IP: "::1", Port: 8000, Aliases: []string{"x"}}
	if got, want := a.Endpoint(), "[::1]:8000"; got != want {
		t.Errorf("Endpoint() = %q, want %q", got, want)
	}
	same, b := a, a
	b.Aliases = []string{"y"}
	if !a.Equal(same) || a.Equal(b) {
		t.Errorf("Equal: a.Equal(a copy) = %v, a.Equal(b) = %v, want true, false", a.Equal(same), a.Equal(b))
	}
}

// TestRanks checks the expansion of a data-parallel pod into one candidate
// per rank: names, event ports (a port of 0 left for the subscriber), the
// rank fields, and a one-rank pod left alone.
func TestRanks(t *testing.T) {
	one := Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, DPSize: 1}
	if got := Ranks(one); len(got) != 1 || !got[0].Equal(one) {
		t.Errorf("Ranks(one rank) = %+v, want the pod itself", got)
	}
	dp := Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "m", ReplayPort: 7000, DPSize: 3, Ready: true}
	got := Ranks(dp)
	if len(got) != 3 {
		t.Fatalf("Ranks(DP 3) = %d candidates, want 3", len(got))
	}
	for k, c := range got {
		want := dp
		want.Name, want.EventPort, want.ReplayPort = RankName("llm/a", k), 0, 7000+k
		want.DPSize, want.DPRank, want.DPRanks = 0, k, 3
		if !c.Equal(want) {
			t.Errorf("rank %d = %+v, want %+v", k, c, want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("rank %d: %v", k, err)
		}
	}
	if got[0].Name != "llm/a" || got[2].Name != "llm/a:rank-2" {
		t.Errorf("names %q, %q, want llm/a, llm/a:rank-2", got[0].Name, got[2].Name)
	}
}
