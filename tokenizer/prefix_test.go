package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// prefixFragments are the pieces random texts are made of: words, numbers,
// whitespace runs, punctuation, CJK, emoji, combining marks, chat markup.
var prefixFragments = []string{
	"the", " router", " reads", "request", "s", " ", "  ", "   ", "\n", "\n\n", "\t", " \n ", "\r\n",
	"123", "4567", " 89", "3.14159", "1,000,000", "0x1F", "2026-11-24",
	"don't", "'s", "'ll", "I'M", "hello", "ing", " world", "_x", "héllo", "e\u0301", "Ａｂｃ",
	"中文", "测试文本", "日本語のテキスト", "한국어", "ภาษาไทย", "العربية", "Ελληνικά",
	"😀", "👩‍💻", "🇺🇸", "✨✨", "…", "—", "!!", "?", "{", "}", "\"", "```", "    def f(x):\n        return x\n",
	"<", "|", ">", "<|", "|>", "im_", "<s>", "</s>", "[INST]", "\u00a0", "\u200d", "\u3000",
}

// addedContents returns the contents of a tokenizer.json's added tokens.
func addedContents(t testing.TB, data []byte) []string {
	t.Helper()
	var f struct {
		AddedTokens []struct{ Content string } `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range f.AddedTokens {
		out = append(out, a.Content)
	}
	return out
}

// prefixModel is a tokenizer of the differential test and the added
// tokens its texts use.
type prefixModel struct {
	name  string
	tok   *Tokenizer
	added []string // a sample
	all   []string // every added token
}

// prefixModels is every model of the parity suite, plus the variants whose
// added tokens strip whitespace or stand alone (lstrip, rstrip,
// single_word) and whose Metaspace prepends only to the first piece.
func prefixModels(t testing.TB) []prefixModel {
	t.Helper()
	var out []prefixModel
	for _, m := range oracle.Models {
		data, err := os.ReadFile(filepath.Join(oracle.ModelDir(t, m), "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		all := addedContents(t, data)
		// The chat markup first; a sample of the rest (reserved tokens).
		added := all
		if len(added) > 40 {
			added = append(added[:20:20], added[len(added)-20:]...)
		}
		out = append(out, prefixModel{m, loadModel(t, m), added, all})
	}
	for _, v := range variants {
		if v.name != "bytelevel-regex-prefix-added-options" && v.name != "metaspace-first" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(oracle.ModelDir(t, v.base), "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		patched, err := patchJSON(data, v.patch)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := New(patched, nil)
		if err != nil {
			t.Fatal(err)
		}
		added := addedContents(t, patched)
		out = append(out, prefixModel{v.name, tok, added, added})
	}
	return out
}

// randomText is about n bytes of fragments and added tokens.
func randomText(r *rand.Rand, added []string, n int) string {
	var b strings.Builder
	for b.Len() < n {
		switch k := r.IntN(10); {
		case k < 2 && len(added) > 0:
			b.WriteString(added[r.IntN(len(added))])
		case k < 3:
			b.WriteString(strings.Repeat(" ", 1+r.IntN(6)))
		default:
			b.WriteString(prefixFragments[r.IntN(len(prefixFragments))])
		}
	}
	return b.String()
}

// plainText is about n bytes of the fragments that neither hold an added
// token nor markup that could join into one: a long stretch with no mark.
func plainText(r *rand.Rand, added []string, n int) string {
	var plain []string
	for _, f := range prefixFragments {
		ok := !strings.ContainsAny(f, "<>[]|_")
		for _, a := range added {
			ok = ok && !strings.Contains(f, a) && !strings.Contains(a, f)
		}
		if ok {
			plain = append(plain, f)
		}
	}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(plain[r.IntN(len(plain))])
	}
	return b.String()
}

// chatText is a rendered conversation of turns: markup around messages.
func chatText(r *rand.Rand, added []string, turns int) string {
	opening, closing := "<|im_start|>", "<|im_end|>"
	if len(added) >= 2 {
		opening, closing = added[r.IntN(min(8, len(added)))], added[r.IntN(min(8, len(added)))]
	}
	var b strings.Builder
	for range turns {
		b.WriteString(opening)
		b.WriteString([]string{"user\n", "assistant\n", "system\n", " user", ""}[r.IntN(5)])
		b.WriteString(randomText(r, added, 20+r.IntN(400)))
		b.WriteString(closing)
		b.WriteString([]string{"\n", "", "\n\n", " "}[r.IntN(4)])
	}
	return b.String()
}

// cutRune returns a random rune boundary of s.
func cutRune(r *rand.Rand, s string) int {
	i := r.IntN(len(s) + 1)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// checkPrefixEncode encodes text through c and whole, and reports a
// difference; it returns the ids reused.
func checkPrefixEncode(t *testing.T, name string, c *PrefixCache, text string, special bool) int {
	t.Helper()
	want, err := c.t.Encode(text, special)
	if err != nil {
		t.Fatal(err)
	}
	got, hit, err := c.AppendEncode([]uint32{7}, text, special)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 7 || !slices.Equal(got[1:], want) {
		t.Fatalf("%s: cached encoding of %q (special %v, reused %d) = %s", name, text, special, hit.Reused, oracle.Diff(got[1:], want))
	}
	return hit.Reused
}

// TestPrefixDifferential proves incremental encoding equal to full
// encoding for every model of the parity suite (and the added-token and
// Metaspace variants) over thousands of random prompt/suffix splits: a
// cached prompt, then the same text cut anywhere (inside words, numbers,
// whitespace runs, CJK, emoji, added tokens) and continued at random, with
// and without special tokens.
func TestPrefixDifferential(t *testing.T) {
	splits := 2500 // prompts, each continued three times
	switch {
	case testing.Short():
		splits = 200
	case raceEnabled:
		splits = 600
	}
	for _, m := range prefixModels(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(len(m.name)), 27))
			var reused, hits, total int
			var scanOnly uint64
			for i := range splits {
				c := NewPrefixCache(m.tok, 1<<20)
				c.chunk = []int{8, 64, prefixChunk}[i%3]
				special := i%2 == 1
				var prompt string
				switch {
				case i%8 == 0 && len(m.added) > 0:
					// A message longer than the resynchronization window, then
					// an added token: continued after it, the window before
					// that token's mark is checked by the scan alone.
					prompt = chatText(r, m.added, 1) + plainText(r, m.all, resyncWindow+r.IntN(2000)) + m.added[r.IntN(min(8, len(m.added)))] + "\n"
				case i%4 < 2:
					prompt = chatText(r, m.added, 1+r.IntN(6))
				default:
					prompt = randomText(r, m.added, 100+r.IntN(1500))
				}
				checkPrefixEncode(t, m.name, c, prompt, special)
				// The next turns: cut anywhere, continued; or extended.
				for k := range 3 {
					cut := cutRune(r, prompt)
					if r.IntN(3) == 0 || k == 0 && i%8 == 0 {
						cut = len(prompt)
					}
					next := prompt[:cut] + chatText(r, m.added, r.IntN(3)) + randomText(r, m.added, r.IntN(60))
					n := checkPrefixEncode(t, m.name, c, next, special)
					total++
					if n > 0 {
						hits++
						reused += n
					}
					prompt = next
				}
				if s := c.Stats(); s.ResyncFailures != 0 {
					t.Fatalf("%s: %d resynchronization failures", m.name, s.ResyncFailures)
				}
				scanOnly += c.scanOnly.Load()
			}
			if scanOnly == 0 {
				t.Fatalf("%s: no window was long enough to be checked by the scan alone", m.name)
			}
			t.Logf("%s: %d splits, %d reused ids (%d hits, %d long windows)", m.name, total, reused, hits, scanOnly)
			// The cache must actually serve: a test of an idle cache proves nothing.
			if hits < total/4 {
				t.Fatalf("%s: only %d of %d encodings reused ids", m.name, hits, total)
			}
		})
	}
}

// TestPrefixResyncCatchesCorruption corrupts a cached id in the window
// the check re-encodes: the encoding must notice, count it and still be
// exact.
func TestPrefixResyncCatchesCorruption(t *testing.T) {
	tok := loadModel(t, "qwen3")
	c := NewPrefixCache(tok, 1<<20)
	c.chunk = 16
	prompt := "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
	checkPrefixEncode(t, "qwen3", c, prompt, false)
	e := c.lru.next
	last := e.marks[len(e.marks)-1]
	e.chunks[0].ids[last.n-2]++ // inside the window before the last mark
	next := prompt + "4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"
	if n := checkPrefixEncode(t, "qwen3", c, next, false); n != 0 {
		t.Errorf("reused %d ids of a corrupted entry", n)
	}
	if s := c.Stats(); s.ResyncFailures != 1 {
		t.Errorf("ResyncFailures = %d, want 1", s.ResyncFailures)
	}
}

// TestPrefixReuse checks what a growing conversation reuses, and that the
// turn replacing its predecessor shares its ids.
func TestPrefixReuse(t *testing.T) {
	tok := loadModel(t, "qwen3")
	c := NewPrefixCache(tok, 64<<20)
	// Turn i: i questions, the answers to all but the last, and the
	// generation prompt; turn i+1 extends it.
	turn := func(i int) string {
		var b strings.Builder
		b.WriteString("<|im_start|>system\nYou are helpful.<|im_end|>\n")
		for k := range i {
			if k > 0 {
				fmt.Fprintf(&b, "answer %d %s<|im_end|>\n", k, strings.Repeat("dolor sit ", 900))
			}
			fmt.Fprintf(&b, "<|im_start|>user\nquestion %d %s<|im_end|>\n<|im_start|>assistant\n", k, strings.Repeat("lorem ipsum ", 900))
		}
		return b.String()
	}
	var prevIDs int
	for i := 1; i < 6; i++ {
		text := turn(i)
		n := checkPrefixEncode(t, "qwen3", c, text, false)
		if i > 1 && n < prevIDs-8 {
			t.Errorf("turn %d reused %d ids, want about %d", i, n, prevIDs)
		}
		ids, _ := tok.Encode(text, false)
		prevIDs = len(ids)
	}
	s := c.Stats()
	if s.Entries != 1 {
		t.Errorf("%d entries, want 1: each turn replaces the previous", s.Entries)
	}
	if per := float64(s.Bytes) / float64(prevIDs); per > 12 {
		t.Errorf("%.1f bytes per cached id", per)
	}
	if n := checkPrefixEncode(t, "qwen3", c, turn(5), false); n != prevIDs {
		t.Errorf("the same text again reused %d of %d ids", n, prevIDs)
	}
}

// TestPrefixBudget checks that the cache holds no more than its budget.
func TestPrefixBudget(t *testing.T) {
	tok := loadModel(t, "llama3_1")
	const budget = 64 << 10
	c := NewPrefixCache(tok, budget)
	c.chunk = 64
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		checkPrefixEncode(t, "llama3_1", c, chatText(r, nil, 3), false)
		if s := c.Stats(); s.Bytes > budget || s.Bytes < 0 {
			t.Fatalf("holds %d bytes, budget %d", s.Bytes, budget)
		}
	}
	if s := c.Stats(); s.Evictions == 0 || s.Entries == 0 {
		t.Errorf("stats %+v: want evictions and entries", s)
	}
	// An entry bigger than the whole budget is not kept.
	small := NewPrefixCache(tok, 1024)
	checkPrefixEncode(t, "llama3_1", small, strings.Repeat("<|eot_id|>word ", 400), false)
	if s := small.Stats(); s.Entries != 0 || s.Bytes != 0 {
		t.Errorf("stats %+v: want nothing held", s)
	}
}

// TestPrefixConcurrent encodes turns of several conversations from several
// goroutines through one cache (run with -race).
func TestPrefixConcurrent(t *testing.T) {
	tok := loadModel(t, "qwen3")
	c := NewPrefixCache(tok, 256<<10)
	c.chunk = 32
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			text := chatText(r, []string{"<|im_start|>", "<|im_end|>"}, 2)
			for range 30 {
				text += chatText(r, []string{"<|im_start|>", "<|im_end|>"}, 1)
				want, _ := tok.Encode(text, false)
				got, hit, err := c.AppendEncode(nil, text, false)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("concurrent encoding differs (%v)", err)
					return
				}
				c.Attach(hit, len(got), 8)
			}
		}()
	}
	wg.Wait()
}

// FuzzPrefixEncode encodes a prompt through a cache, then the prompt cut at
// any byte and continued with any text: always exactly Encode's ids.
func FuzzPrefixEncode(f *testing.F) {
	f.Add("<|im_start|>user\nhello world 123<|im_end|>\n<|im_start|>assistant\n", "4<|im_end|>", uint16(70), uint8(0), false)
	f.Add("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi 中文<|eot_id|>", " 😀  x", uint16(90), uint8(1), true)
	f.Add("<s>[INST] say hello [/INST] hello   world</s>", "[INST]", uint16(40), uint8(4), true)
	f.Add("<start_of_turn>user\n  \t 12345<end_of_turn>\n<start_of_turn>model\n", "\n", uint16(1000), uint8(5), false)
	toks := make([]*Tokenizer, len(oracle.Models))
	for i, m := range oracle.Models {
		toks[i] = loadModel(f, m)
	}
	f.Fuzz(func(t *testing.T, prompt, suffix string, cut uint16, which uint8, special bool) {
		tok := toks[int(which)%len(toks)]
		c := NewPrefixCache(tok, 1<<20)
		c.chunk = 1 + int(which)/len(toks)%16
		checkPrefixEncode(t, "fuzz", c, prompt, special)
		next := prompt[:min(int(cut), len(prompt))] + suffix
		checkPrefixEncode(t, "fuzz", c, next, special)
		checkPrefixEncode(t, "fuzz", c, next+prompt, special)
		if s := c.Stats(); s.ResyncFailures != 0 {
			t.Fatalf("%d resynchronization failures", s.ResyncFailures)
		}
	})
}

// TestPrefixHorizon continues cached texts exactly where the text after an
// added token changes what was matched: a longer token that the cached
// text's end cut short, an rstrip token whose whitespace goes on, a
// single_word token that the next text joins to a word. Each must be
// encoded as a whole text is, reusing only what comes before.
func TestPrefixHorizon(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(oracle.ModelDir(t, "qwen3"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := qwenAddedVariant()
	for i, c := range []string{"<|a|>", "<|a|>bc"} {
		tokens = append(tokens, map[string]any{
			"id": 151680 + i, "content": c, "special": true,
			"lstrip": false, "rstrip": false, "single_word": false, "normalized": false,
		})
	}
	patched, err := patchJSON(data, map[string]any{"added_tokens": tokens})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(patched, nil)
	if err != nil {
		t.Fatal(err)
	}
	head := "<|im_start|>user\nsome words first<|im_end|>\n"
	for _, c := range []struct{ cached, next string }{
		{head + "x<|a|>b", head + "x<|a|>bc and more"},
		{head + "x<|a|>", head + "x<|a|>bc and more"},
		{head + "x<|im_end|>  ", head + "x<|im_end|>   \n\tnext<|im_end|>"},
		{head + "x<|im_end|>", head + "x<|im_end|> \nnext"},
		{head + "say hello", head + "say helloworld<|im_end|>"},
		{head + "say hello ", head + "say hello world"},
		{head + "<|im_start|>", head + "<|im_start|><|im_end|>"},
	} {
		for _, special := range []bool{false, true} {
			cache := NewPrefixCache(tok, 1<<20)
			cache.chunk = 8
			checkPrefixEncode(t, "horizon", cache, c.cached, special)
			n := checkPrefixEncode(t, "horizon", cache, c.next, special)
			if n == 0 {
				t.Errorf("%q after %q reused nothing: the marks of the shared head should serve", c.next, c.cached)
			}
		}
	}
}
