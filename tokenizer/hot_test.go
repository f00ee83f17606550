package tokenizer

import (
	"math/rand/v2"
	"slices"
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
