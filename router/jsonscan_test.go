package router

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var jsonSeeds = []string{
	`{}`, ` { "a" : 1 } `, `{"a":"x\u00e9\ud83d\ude00\n\"","b":[1,-2.5e+3,true,false,null,{"c":[]}]}`,
	`{"model":"m","prompt":"hi","model":"last"}`, `{"a":"\ud800"}`, `{"a":"\udc00\ud800x"}`, `{"a":01}`,
	`{"a":1,}`, `{"a"}`, `[1,2]`, `{"a":"\x01"}`, `{"a":1} {}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
	`{"a":tru}`, `{"a":"\q"}`, `{"a":"\u12"}`, "{\"a\":\"caf\xc3\xa9\"}", "{\"a\":\"\xff\"}", `{"a":[1,[2,[3]]]}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

// TestScanMatchesEncodingJSON checks the scanner against encoding/json on the
// seeds; FuzzScanObject does the same on generated input.
func TestScanMatchesEncodingJSON(t *testing.T) {
	for _, s := range jsonSeeds {
		checkScan(t, []byte(s))
	}
}

// Strings of every length up to three words with a special byte (quote,
// backslash, control character, high byte) at every offset: the word-wise
// skip must stop exactly where the byte loop would.
func TestScanStringWordBoundaries(t *testing.T) {
	for n := range 26 {
		for at := range n {
			for _, c := range []string{`\"`, `\\`, `\n`, "\x01", "\x1f", " ", "\x7f", "\xc3\xa9", "\xff", `\u00e9`} {
				b := []byte(`{"k":"` + strings.Repeat("a", at) + c + strings.Repeat("b", n-at) + `"}`)
				checkScan(t, b)
				checkScan(t, b[:len(b)-2]) // unterminated
			}
		}
	}
}

func FuzzScanObject(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkScan(t, data) })
}

func checkScan(t *testing.T, data []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	werr := json.Unmarshal(data, &want)
	if werr == nil && want == nil {
		werr = errSyntax // "null": encoding/json leaves the map nil; a body must be an object
	}
	got := map[string]json.RawMessage{}
	gerr := scanObject(data, func(k string, v []byte) error {
		got[k] = v
		return nil
	})
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("scanObject(%q) = %v, encoding/json says %v", data, gerr, werr)
	}
	if werr != nil {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("scanObject(%q) keys = %d, want %d", data, len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("scanObject(%q)[%q] = %q, want %q", data, k, got[k], v)
		}
		if len(v) > 0 && v[0] == '"' {
			var s string
			if err := json.Unmarshal(v, &s); err != nil || unquote(v) != s {
				t.Fatalf("unquote(%q) = %q, want %q", v, unquote(v), s)
			}
		}
	}
}
