package tokenizer

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"unicode"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"

	"golang.org/x/text/unicode/norm"

	"github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"
)

// unicodeOracle is what testdata/unicode.js reports.
type unicodeOracle struct {
	Classes map[string][][2]rune `json:"classes"`
	NFC     [][4]json.RawMessage `json:"nfc"`    // cp, nfc(cp), nfd(cp), nfc(nfd(cp))
	NFCOf   []string             `json:"nfc_of"` // nfc of the strings sent
}

// domain calls fn for every code point unicode.js checks.
func domain(fn func(r rune)) {
	for r := rune(0); r <= 0x323af; r++ {
		if !unicode.Is(unicode.Cs, r) {
			fn(r)
		}
	}
	for r := rune(0xe0000); r <= 0xe01ef; r++ {
		fn(r)
	}
}

// TestUnicodeOracle checks the Unicode 16 tables the scanners use, and NFC,
// against the Rust tokenizers' own regex engine and normalizer, code point
// by code point (testdata/unicode.js).
func TestUnicodeOracle(t *testing.T) {
	// Go's canonical decompositions, for the oracle to compose.
	var decomposed []string
	domain(func(r rune) {
		if d := norm.NFD.String(string(r)); d != string(r) {
			decomposed = append(decomposed, d)
		}
	})
	in, _ := json.Marshal(decomposed)
	cmd := oracle.NodeScript(t, "unicode.js")
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("unicode.js: %v", err)
	}
	var res unicodeOracle
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	checkClasses(t, res.Classes)
	if len(res.NFCOf) != len(decomposed) {
		t.Fatalf("unicode.js composed %d strings, want %d", len(res.NFCOf), len(decomposed))
	}
	for i, d := range decomposed {
		if got := nfc(d); got != res.NFCOf[i] {
			t.Errorf("nfc(%U) = %U, Rust %U", []rune(d), []rune(got), []rune(res.NFCOf[i]))
		}
	}
	checkNFC(t, res.NFC)
}

// checkClasses compares the regex engine's members of each class with the
// unicode16 tables.
func checkClasses(t *testing.T, classes map[string][][2]rune) {
	t.Helper()
	for name, ranges := range classes {
		table := unicode16.Tables[name]
		rust := make([]bool, unicode.MaxRune+1)
		for _, rg := range ranges {
			for r := rg[0]; r <= rg[1]; r++ {
				rust[r] = true
			}
		}
		bad := 0
		domain(func(r rune) {
			if rust[r] != unicode.Is(table, r) {
				if bad++; bad <= 10 {
					t.Errorf("%U: in \\p{%s}: regex engine %v, unicode16 %v", r, name, rust[r], !rust[r])
				}
			}
		})
	}
}

// checkNFC compares nfc with the Rust normalizer on every code point and on
// the Rust decomposition of those it changes.
func checkNFC(t *testing.T, rows [][4]json.RawMessage) {
	t.Helper()
	changed := map[rune]bool{}
	for _, row := range rows {
		var c rune
		var k, d, kd []rune
		for i, dst := range []any{&c, &k, &d, &kd} {
			if err := json.Unmarshal(row[i], dst); err != nil {
				t.Fatal(err)
			}
		}
		changed[c] = true
		if got := []rune(nfc(string(c))); !slices.Equal(got, k) {
			t.Errorf("nfc(%U) = %U, Rust %U", c, got, k)
		}
		if got := []rune(nfc(string(d))); !slices.Equal(got, kd) {
			t.Errorf("nfc(%U) = %U, Rust %U", d, got, kd)
		}
	}
	domain(func(r rune) {
		if !changed[r] && nfc(string(r)) != string(r) {
			t.Errorf("nfc(%U) = %U, Rust leaves it", r, []rune(nfc(string(r))))
		}
	})
}
