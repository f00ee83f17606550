package tokenizer

import (
	"slices"
	"testing"
)

// pieces collects the pieces of a split.
type pieces []string

func (p *pieces) piece(s string, _ int) { *p = append(*p, s) }

// spans collects matches.
type spans [][2]int

func (m *spans) match(i, j int) { *m = append(*m, [2]int{i, j}) }

func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		b    behavior
		in   string
		want []string
	}{
		{isolated, "a  b ", []string{"a", " ", " ", "b", " "}},
		{removed, "a  b ", []string{"a", "b"}},
		{mergedWithPrevious, " a  b", []string{" ", "a ", " ", "b"}},
		{mergedWithNext, "a  b ", []string{"a", " ", " b", " "}},
		{contiguous, "a  b ", []string{"a", "  ", "b", " "}},
		{isolated, "", nil},
	}
	for _, tt := range tests {
		var got pieces
		var r splitRun
		r.run(&step{m: literal(" "), behavior: tt.b}, tt.in, &got)
		if !slices.Equal(got, pieces(tt.want)) {
			t.Errorf("split(%q, behavior %d) = %q, want %q", tt.in, tt.b, got, tt.want)
		}
	}
}

// TestScannerMatchesRegex checks the hand-written scanner against the same
// pattern run by the generic engine.
func TestScannerMatchesRegex(t *testing.T) {
	var texts []string // hand-written, mixes and a sample of fuzz strings
	for i, s := range corpus()[:3000] {
		if i < 400 || i%10 == 0 {
			texts = append(texts, s)
		}
	}
	for _, tc := range []struct {
		pattern string
		sc      matcher
	}{
		{llama3Pattern, scanner{3}},
		{qwenPattern, scanner{1}},
		{o200kPattern, o200k{contractions: true, maxDigits: 3}},
		{tekkenPattern, o200k{maxDigits: 1}},
		{digitsPattern, digits{}},
		{kanaPattern, kana{}},
		{deepseekPattern, deepseekWords{}},
	} {
		rewritten, err := rewritePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		re, err := newRegex(rewritten)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			var a, b spans
			tc.sc.matches(s, &a)
			re.matches(s, &b)
			if !slices.Equal(a, b) {
				t.Fatalf("pattern %.30q, %q: scanner %v, regex %v", tc.pattern, s, a, b)
			}
		}
	}
}
