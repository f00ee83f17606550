package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// modelAdded returns the contents of model's added tokens.
func modelAdded(t testing.TB, model string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(oracle.ModelDir(t, model), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := addedContents(t, data)
	if len(out) == 0 {
		t.Fatalf("%s has no added tokens", model)
	}
	return out
}

// withAdded joins the pieces of s between '|' with added tokens taken in
// turn from added, from the k-th on.
func withAdded(s string, added []string, k int) string {
	pieces := strings.Split(s, "|")
	var b strings.Builder
	for i, p := range pieces {
		if i > 0 {
			b.WriteString(added[(k+i)%len(added)])
		}
		b.WriteString(p)
	}
	return b.String()
}

// checkParts fails unless text encodes in 2 to 5 parts to the same ids,
// and records the same marks, as in one pass; also resumed at a mark.
func checkParts(t *testing.T, tok *Tokenizer, text string, special bool) {
	t.Helper()
	if !utf8.ValidString(text) {
		text = validUTF8(text)
	}
	whole, err := tok.appendEncodeIn(nil, text, special, nil, 1, nil)
	wholeRec := &recorder{}
	wholeMarked, errMarked := tok.appendEncodeIn(nil, text, special, wholeRec, 1, nil)
	if (err == nil) != (errMarked == nil) || err == nil && !slices.Equal(whole, wholeMarked) {
		t.Fatalf("%q: recording changed the encoding: %v, %v then %v, %v", text, whole, err, wholeMarked, errMarked)
	}
	for parts := 2; parts <= 5; parts++ {
		told := 0 // ids progress was told of
		progress := func(ids []uint32) {
			if len(ids) <= told || len(ids) > len(whole) || !slices.Equal(ids, whole[:len(ids)]) {
				t.Fatalf("%q in %d parts: progress told %v after %d ids; the ids are %v", text, parts, ids, told, whole)
			}
			told = len(ids)
		}
		got, gotErr := tok.appendEncodeIn(nil, text, special, nil, parts, progress)
		if (err == nil) != (gotErr == nil) || err == nil && !slices.Equal(got, whole) {
			t.Fatalf("%q in %d parts = %v, %v; in one pass %v, %v", text, parts, got, gotErr, whole, err)
		}
		if err != nil {
			continue
		}
		rec := &recorder{}
		got, _ = tok.appendEncodeIn(nil, text, special, rec, parts, nil)
		if !slices.Equal(got, whole) || !slices.Equal(rec.marks, wholeRec.marks) {
			t.Fatalf("%q in %d parts, recorded: %v, marks %v; in one pass %v, marks %v", text, parts, got, rec.marks, whole, wholeRec.marks)
		}
		// Resumed after the first mark, as a prefix cache resumes.
		if len(wholeRec.marks) > 0 {
			m := wholeRec.marks[0]
			rec := &recorder{from: m.state(), base: 0}
			got, _ := tok.appendEncodeIn(slices.Clone(whole[:m.n]), text, special, rec, parts, nil)
			if !slices.Equal(got, whole) || !slices.Equal(rec.marks, wholeRec.marks[1:]) {
				t.Fatalf("%q in %d parts resumed at %+v: %v, marks %v; in one pass %v, marks %v", text, parts, m, got, rec.marks, whole, wholeRec.marks[1:])
			}
		}
	}
}

// FuzzEncodeParts checks that a text with added tokens (each '|' of the
// input becomes one) encodes in parts byte for byte as in one pass, for
// every model of the oracle, with and without the marks a prefix cache
// records and resumed at one.
func FuzzEncodeParts(f *testing.F) {
	for i, s := range handWritten {
		f.Add(s+"|"+s+"|", uint8(i), false)
	}
	f.Add("|a|", uint8(0), true)
	f.Add(" |  hello|\n\n|world ", uint8(1), false)
	f.Add("\xff|\xfe|x", uint8(2), true)
	toks := make([]*Tokenizer, len(oracle.Models))
	added := make([][]string, len(oracle.Models))
	for i, m := range oracle.Models {
		toks[i], added[i] = loadModel(f, m), modelAdded(f, m)
	}
	f.Fuzz(func(t *testing.T, s string, which uint8, special bool) {
		k := int(which) % len(toks)
		checkParts(t, toks[k], withAdded(s, added[k], int(which)), special)
	})
}

// TestEncodePartsLongChat checks a long chat-shaped text (hundreds of
// messages between added tokens) for every model of the oracle.
func TestEncodePartsLongChat(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 8*minPart; i++ {
		fmt.Fprintf(&b, "|user\n%s message %d: it's 12.5%% done, isn't it?  \n\n|", handWritten[i%len(handWritten)], i)
	}
	for _, m := range oracle.Models {
		t.Run(m, func(t *testing.T) {
			tok := loadModel(t, m)
			text := withAdded(b.String(), modelAdded(t, m), 0)
			checkParts(t, tok, text, true)
		})
	}
}

func TestPartsFor(t *testing.T) {
	for _, c := range []struct{ n, procs, running, want int }{
		{2*minPart - 1, 8, 1, 1}, // too short to part
		{2 * minPart, 2, 1, 2},
		{100 * minPart, 2, 1, 2},
		{100 * minPart, 2, 2, 1}, // as many long encodings as cores
		{100 * minPart, 2, 3, 1},
		{100 * minPart, 8, 2, 4},
		{3 * minPart, 8, 1, 3},    // parts of minPart at least
		{100 * minPart, 64, 1, 8}, // maxParts
		{100 * minPart, 1, 1, 1},
	} {
		if got := partsFor(c.n, c.procs, c.running); got != c.want {
			t.Errorf("partsFor(%d, %d, %d) = %d, want %d", c.n, c.procs, c.running, got, c.want)
		}
	}
}

// BenchmarkEncodeParts encodes a rendered Qwen3 chat of about 100k and 8k
// tokens (words cached, as in a running process) in one pass and as
// Encode does, in parts on the free cores: generated from a short word
// list, and (-code) of kvrouter's own source files, whose many more
// distinct words are what a coding agent's prompt holds.
func BenchmarkEncodeParts(b *testing.B) {
	tok := loadModel(b, "qwen3")
	for _, bc := range []struct {
		name string
		text string
	}{
		{"tokens=100k", benchChat(1, 311)},
		{"tokens=8k", benchChat(1, 25)},
		{"tokens=100k-code", codeChat(b, 350<<10)},
	} {
		text := bc.text
		for _, mode := range []string{"one-pass", "parts"} {
			b.Run(bc.name+"/"+mode, func(b *testing.B) {
				dst, err := tok.AppendEncode(nil, text, false)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					if mode == "one-pass" {
						dst, err = tok.appendEncodeIn(dst[:0], text, false, nil, 1, nil)
					} else {
						dst, err = tok.AppendEncode(dst[:0], text, false)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func TestLineCuts(t *testing.T) {
	for _, c := range []struct {
		s    string
		from int
		want int
	}{
		{"ab\ncd", 1, 3},
		{"ab\ncd", 3, 3},
		{"ab\ncd", 4, -1},
		{"ab\n cd\n\nEf", 1, 8}, // not before a space or a newline
		{"ab\n1\nZ", 1, 5},
		{"ab\n\xc3\xa9", 1, -1}, // an ASCII letter only
		{"ab\n", 1, -1},
		{"\nx", 1, 1},
	} {
		if got := lineStart(c.s, c.from); got != c.want {
			t.Errorf("lineStart(%q, %d) = %d, want %d", c.s, c.from, got, c.want)
		}
	}
	ps := []piece{
		{s: "one\ntwo\nthree\nfour", start: 0},
		{kind: pieceToken, id: 7},
		{s: "short", start: 25},
		{s: "x\ny\nz\n", start: 40}, // shorter than twice the share
		{s: "abcdefgh\nijk\nlm", start: 50},
	}
	got := cutLines(ps, 4)
	want := []piece{
		{s: "one\n", start: 0},
		{s: "two\n", start: 4},
		{s: "three\n", start: 8},
		{s: "four", start: 14},
		{kind: pieceToken, id: 7},
		{s: "short", start: 25},
		{s: "x\ny\nz\n", start: 40},
		{s: "abcdefgh\n", start: 50},
		{s: "ijk\nlm", start: 59},
	}
	if !slices.Equal(got, want) {
		t.Errorf("cutLines = %+v\nwant %+v", got, want)
	}
	if got := cutLines(ps[1:3], 4); &got[0] != &ps[1] {
		t.Error("cutLines copied pieces it did not cut")
	}
	// The pipelines that allow cuts, and those that do not (a prepended
	// or metaspace '▁', no pre-tokenizer).
	for m, want := range map[string]bool{"qwen3": true, "llama3_1": true, "deepseek_v3": true, "gptoss": true, "llama2": false, "gemma3": false} {
		if got := loadModel(t, m).lineCuts; got != want {
			t.Errorf("%s: lineCuts = %v, want %v", m, got, want)
		}
	}
}
