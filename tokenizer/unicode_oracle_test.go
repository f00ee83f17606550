package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"
)

// TestUnicodeOracle checks the Unicode 16 tables the scanners use, and NFC,
// against the Rust tokenizers' own regex engine and normalizer, code point
// by code point (testdata/unicode.js).
func TestUnicodeOracle(t *testing.T) {
	// Go's canonical decompositions, for the oracle to compose.
	var decomposed []string
	for r := rune(0); r <= 0x323af; r++ {
		if d := norm.NFD.String(string(r)); d != string(r) && !unicode.Is(unicode.Cs, r) {
			decomposed = append(decomposed, d)
		}
	}
	in, _ := json.Marshal(decomposed)
	cmd := exec.Command("node", filepath.Join("testdata", "unicode.js"))
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(), "ORACLE_NODE_MODULES="+oracleModules(t))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("unicode.js: %v", err)
	}
	var res struct {
		Classes map[string][][2]rune `json:"classes"`
		NFC     [][4]json.RawMessage `json:"nfc"`
		NFCOf   []string             `json:"nfc_of"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	inDomain := func(r rune) bool { return r <= 0x323af && !unicode.Is(unicode.Cs, r) || r >= 0xe0000 && r <= 0xe01ef }
	for name, ranges := range res.Classes {
		table := unicode16.Tables[name]
		rust := make([]bool, unicode.MaxRune+1)
		for _, rg := range ranges {
			for r := rg[0]; r <= rg[1]; r++ {
				rust[r] = true
			}
		}
		bad := 0
		for r := rune(0); r <= 0xe01ef; r++ {
			if r == 0x323b0 {
				r = 0xe0000
			}
			if inDomain(r) && rust[r] != unicode.Is(table, r) {
				if bad++; bad <= 10 {
					t.Errorf("%U: in \\p{%s}: regex engine %v, unicode16 %v", r, name, rust[r], !rust[r])
				}
			}
		}
	}
	if len(res.NFCOf) != len(decomposed) {
		t.Fatalf("unicode.js composed %d strings, want %d", len(res.NFCOf), len(decomposed))
	}
	for i, d := range decomposed {
		if got := nfc(d); got != res.NFCOf[i] {
			t.Errorf("nfc(%U) = %U, Rust %U", []rune(d), []rune(got), []rune(res.NFCOf[i]))
		}
	}
	changed := map[rune]bool{}
	for _, row := range res.NFC {
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
	for r := rune(0x80); r <= 0xe01ef; r++ {
		if r == 0x323b0 {
			r = 0xe0000
		}
		if inDomain(r) && !changed[r] && nfc(string(r)) != string(r) {
			t.Errorf("nfc(%U) = %U, Rust leaves it", r, []rune(nfc(string(r))))
		}
	}
}
