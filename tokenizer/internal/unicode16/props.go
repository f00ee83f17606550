package unicode16

import (
	"sync"
	"unicode"
)

// Prop is a set of the properties the tokenizer scanners test, one bit each.
type Prop uint16

// The properties in a Prop.
const (
	PropL     Prop = 1 << iota // Letter
	PropLu                     // Uppercase_Letter
	PropLl                     // Lowercase_Letter
	PropLt                     // Titlecase_Letter
	PropLm                     // Modifier_Letter
	PropLo                     // Other_Letter
	PropM                      // Mark
	PropN                      // Number
	PropP                      // Punctuation
	PropS                      // Symbol
	PropSpace                  // White_Space
	PropAlpha                  // Alphabetic
)

var propTables = [...]struct {
	p Prop
	t *unicode.RangeTable
}{
	{PropL, L},
	{PropLu, Lu},
	{PropLl, Ll},
	{PropLt, Lt},
	{PropLm, Lm},
	{PropLo, Lo},
	{PropM, M},
	{PropN, N},
	{PropP, P},
	{PropS, S},
	{PropSpace, WhiteSpace},
	{PropAlpha, Alphabetic},
}

var (
	bmpOnce sync.Once
	bmp     []Prop // properties of U+0000..U+FFFF
)

func buildBMP() {
	t := make([]Prop, 0x10000)
	for _, pt := range propTables {
		for _, r := range pt.t.R16 {
			for c := int(r.Lo); c <= int(r.Hi); c += int(r.Stride) {
				t[c] |= pt.p
			}
		}
	}
	bmp = t
}

// Props returns the properties of r under Unicode 16.0.
func Props(r rune) Prop {
	if r >= 0 && r < 0x10000 {
		bmpOnce.Do(buildBMP)
		return bmp[r]
	}
	var p Prop
	if r < 0 || r > unicode.MaxRune {
		return 0
	}
	for _, pt := range propTables {
		if unicode.Is(pt.t, r) {
			p |= pt.p
		}
	}
	return p
}
