package unicode16

import (
	"testing"
	"unicode"
)

// TestTablesExtendGo checks the generated tables against Go's Unicode 15.0
// tables: they may differ only on code points Go does not assign, plus a
// short, known list of recategorized ones.
func TestTablesExtendGo(t *testing.T) {
	goTables := map[string]*unicode.RangeTable{
		"L": unicode.L, "Lu": unicode.Lu, "Ll": unicode.Ll, "Lt": unicode.Lt, "Lm": unicode.Lm,
		"Lo": unicode.Lo, "M": unicode.M, "N": unicode.N, "Nd": unicode.Nd, "P": unicode.P,
		"S": unicode.S, "Z": unicode.Z, "Zs": unicode.Zs, "Cc": unicode.Cc, "Co": unicode.Co,
		"White_Space": unicode.White_Space,
	}
	assignedInGo := func(r rune) bool {
		return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z,
			unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
	}
	changed := 0
	for name, gt := range goTables {
		ut := Tables[name]
		if ut == nil {
			t.Fatalf("Tables[%q] missing", name)
		}
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if unicode.Is(gt, r) != unicode.Is(ut, r) && assignedInGo(r) {
				changed++
			}
		}
	}
	if changed > 64 {
		t.Errorf("%d assigned code points changed category between Go's tables and Unicode 16, want a handful", changed)
	}
}

func TestUnicode16Additions(t *testing.T) {
	tests := []struct {
		r    rune
		want Prop
	}{
		{'a', PropL | PropLl | PropAlpha},
		{'A', PropL | PropLu | PropAlpha},
		{'1', PropN},
		{' ', PropSpace},
		{'\u3000', PropSpace},
		{'\u0085', PropSpace},
		{'\u200b', 0},
		{'!', PropP},
		{'$', PropS},
		{'\u0301', PropM},
		{'\u1c89', PropL | PropLu | PropAlpha},     // U+1C89, a Cyrillic capital letter new in 16.0
		{'\U00016D40', PropL | PropLm | PropAlpha}, // KIRAT RAI SIGN ANUSVARA, new in 16.0
		{'\u0345', PropM | PropAlpha},              // Other_Alphabetic mark
		{'\u2160', PropN | PropAlpha},              // ROMAN NUMERAL ONE, Nl
		{'\U0001F600', PropS},
		{'\U000E0001', 0},
		{-1, 0},
		{unicode.MaxRune + 1, 0},
	}
	for _, tt := range tests {
		if got := Props(tt.r); got != tt.want {
			t.Errorf("Props(%U) = %b, want %b", tt.r, got, tt.want)
		}
	}
}
