package chat

import (
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// loaded caches tokenizers across tests: loading is the slow part.
var loaded sync.Map // model name -> *tokenizer.Tokenizer

// loadModel returns the tokenizer of an oracle model.
func loadModel(t testing.TB, model string) *tokenizer.Tokenizer {
	t.Helper()
	if tok, ok := loaded.Load(model); ok {
		return tok.(*tokenizer.Tokenizer)
	}
	tok, err := tokenizer.Load(oracle.ModelDir(t, model))
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(model, tok)
	return tok
}
