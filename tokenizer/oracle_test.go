package tokenizer

import (
	"fmt"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// oracleIDs encodes texts with the Rust tokenizers: [i][0] without and
// [i][1] with special tokens.
func oracleIDs(t testing.TB, model string, texts []string) [][2][]uint32 {
	t.Helper()
	return oracle.IDs(t, oracle.ModelDir(t, model), texts)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:n], len(s))
}

// compare encodes texts with tok and reports every difference from want.
func compare(t *testing.T, model string, tok *Tokenizer, texts []string, want [][2][]uint32) {
	t.Helper()
	bad := 0
	for i, s := range texts {
		for k, special := range []bool{false, true} {
			got, err := tok.Encode(s, special)
			if err != nil {
				t.Errorf("%s: Encode(%s, %v): %v", model, truncate(s, 80), special, err)
				continue
			}
			if d := oracle.Diff(got, want[i][k]); d != "" {
				bad++
				if bad <= 10 {
					t.Errorf("%s: Encode(%s, add_special_tokens=%v): %s", model, truncate(s, 120), special, d)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d encodings differ from the oracle", model, bad, 2*len(texts))
	}
}

// loaded caches tokenizers across tests: loading is the slow part.
var loaded sync.Map // model name -> *Tokenizer

// loadModel returns the tokenizer of an oracle model.
func loadModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	if tok, ok := loaded.Load(model); ok {
		return tok.(*Tokenizer)
	}
	tok, err := Load(oracle.ModelDir(t, model))
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(model, tok)
	return tok
}
