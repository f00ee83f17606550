package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// TestHotWords checks that a word encoded through a hotWords gets the ids
// encodeWord gives it, the first time (a miss that fills the entry) and
// the second (a hit), for words of every length a hotWords keeps and
// around it, read both far from the end of their text and at its end.
// Words of NUL bytes have the bytes of an empty entry: only the length
// tells them apart.
func TestHotWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var words []string
	for _, s := range append(slices.Clone(handWritten), fragments...) {
		for _, w := range []string{s, s + "\x00", "\x00" + s, s + "s", strings.Repeat(s, 3)} {
			for n := 1; n <= min(len(w), hotLongest+1); n++ {
				words = append(words, w[:n])
			}
		}
	}
	for range 2000 {
		b := make([]byte, 1+rng.IntN(hotLongest+1))
		for i := range b {
			b[i] = "ab \x00\n.é"[rng.IntN(8)]
		}
		words = append(words, string(b))
	}
	for _, model := range oracle.Models {
		tok := loadModel(t, model)
		e := encoder{t: tok, hot: new(hotWords)}
		for pass := range 2 {
			for _, w := range words {
				want, wantErr := tok.encodeWord(nil, w)
				for _, s := range []string{w + strings.Repeat("~", 16), "~" + w} {
					i := strings.Index(s, w)
					e.ids, e.err = e.ids[:0], nil
					e.wordAt(s, i, i+len(w))
					if (wantErr == nil) != (e.err == nil) || !slices.Equal(e.ids, want) {
						t.Fatalf("%s, pass %d: %q in %q = %v, %v; encodeWord: %v, %v", model, pass, w, s, e.ids, e.err, want, wantErr)
					}
				}
			}
		}
	}
}

// TestHotWordsTwoWays checks that two words of one set are both kept, the
// newer first, and that the older one is then a hit (a miss would encode
// it again and move it first).
func TestHotWordsTwoWays(t *testing.T) {
	tok := loadModel(t, "qwen3")
	seen := map[uint32]string{}
	var w1, w2 string
	for i := 0; w2 == ""; i++ {
		w := " " + strconv.FormatInt(int64(i), 26) // letters and digits
		if strings.ContainsAny(w, "0123456789") {
			continue // words of up to three ids: no digit
		}
		if ids, _ := tok.encodeWord(nil, w); len(ids) > hotIDs {
			continue
		}
		if _, _, k := hotKey(w, 0, len(w)); seen[k] != "" {
			w1, w2 = seen[k], w
		} else {
			seen[k] = w
		}
	}
	e := encoder{t: tok, hot: new(hotWords)}
	holds := func(x *hotWord, w string) bool {
		a, b, _ := hotKey(w, 0, len(w))
		return x.holds(a, b, len(w))
	}
	_, _, k := hotKey(w1, 0, len(w1))
	set := (*[2]hotWord)(e.hot[k : k+2])
	for pass, w := range []string{w1, w2, w1, w2} {
		want, err := tok.encodeWord(nil, w)
		if err != nil {
			t.Fatal(err)
		}
		e.ids = e.ids[:0]
		e.wordAt(w, 0, len(w))
		if e.err != nil || !slices.Equal(e.ids, want) {
			t.Fatalf("pass %d: %q = %v, %v; encodeWord: %v", pass, w, e.ids, e.err, want)
		}
		if pass > 0 && (!holds(&set[0], w2) || !holds(&set[1], w1)) {
			t.Fatalf("pass %d (%q): the set does not hold %q then %q", pass, w, w2, w1)
		}
	}
}

// TestHotLimit checks that a tokenizer lends at most its limit of tables
// at once, and that an encoding that finds none taken gets the ids one
// with a table gets.
func TestHotLimit(t *testing.T) {
	tok, err := Load(oracle.ModelDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("<|im_start|>user\nthe hot words, it's 12.5% of them  \n<|im_end|>\n", 200)
	want, err := tok.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	var taken []*hotWords
	for range tok.hot.limit {
		h := tok.hot.take()
		if h == nil {
			t.Fatalf("table %d of %d refused", len(taken)+1, tok.hot.limit)
		}
		taken = append(taken, h)
	}
	if h := tok.hot.take(); h != nil {
		t.Fatalf("a table past the limit of %d lent", tok.hot.limit)
	}
	got, err := tok.Encode(text, false)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("without a table: %v, %v; with one: %v", got, err, want)
	}
	for _, h := range taken {
		tok.hot.put(h)
	}
	if h := tok.hot.take(); h == nil {
		t.Fatal("no table lent after all came back")
	}
}
