package router

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// errNoChat is returned for chat requests until a chat renderer is wired:
// they are routed by load, with reason tokenize-error.
var errNoChat = errors.New("router: chat templates are not wired yet")

// RegistryTokenizers gives prompts' token ids from a tokenizer registry:
// completions are encoded with add_special_tokens=true, as vLLM does.
type RegistryTokenizers struct {
	Registry *tokenizer.Registry
}

// Tokens implements Tokenizers.
func (t RegistryTokenizers) Tokens(base string, p *Parsed) ([]uint32, error) {
	tk, err := t.Registry.For(base)
	if errors.Is(err, tokenizer.ErrUnknownModel) {
		return nil, fmt.Errorf("%w: %s", ErrNoTokenizer, base)
	}
	if err != nil {
		return nil, err
	}
	if p.Chat != nil {
		return nil, errNoChat
	}
	return tk.Encode(p.Prompt, true)
}
