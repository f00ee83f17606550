package tokenizer

import (
	"slices"
	"testing"
)

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
		var got []string
		splitStep{m: literal(" "), behavior: tt.b}.split(tt.in, func(p string) { got = append(got, p) })
		if !slices.Equal(got, tt.want) {
			t.Errorf("split(%q, behavior %d) = %q, want %q", tt.in, tt.b, got, tt.want)
		}
	}
}

// TestScannerMatchesRegex checks the hand-written scanner against the same
// pattern run by the generic engine.
func TestScannerMatchesRegex(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		sc      matcher
	}{
		{llama3Pattern, scanner{3}},
		{qwenPattern, scanner{1}},
		{o200kPattern, o200k{}},
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
		for _, s := range corpus()[:3000] {
			var a, b [][2]int
			tc.sc.matches(s, func(i, j int) { a = append(a, [2]int{i, j}) })
			re.matches(s, func(i, j int) { b = append(b, [2]int{i, j}) })
			if !slices.Equal(a, b) {
				t.Fatalf("pattern %.30q, %q: scanner %v, regex %v", tc.pattern, s, a, b)
			}
		}
	}
}
