package fleetsim

import (
	"slices"
	"testing"
)

// TestPrefixScores checks llm-d's normalization of the precise prefix
// score: min-max over the pods that match, 1 for all of them on a tie, 0
// for a pod matching nothing, times the weight.
func TestPrefixScores(t *testing.T) {
	for _, tc := range []struct {
		blocks []int
		want   []float64
	}{
		{[]int{0, 4, 8, 6}, []float64{0, 0, 2, 1}},
		{[]int{0, 5, 0}, []float64{0, 2, 0}},
		{[]int{3, 3}, []float64{2, 2}},
		{[]int{0, 0}, []float64{0, 0}},
	} {
		got := make([]float64, len(tc.blocks))
		prefixScores(got, tc.blocks, 2)
		if !slices.Equal(got, tc.want) {
			t.Errorf("prefixScores(%v, weight 2) = %v, want %v", tc.blocks, got, tc.want)
		}
	}
}
