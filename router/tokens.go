package router

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// errNoChat is returned for chat requests when no chat renderer is
// configured: they are routed by load, with reason tokenize-error.
var errNoChat = errors.New("router: no chat renderer configured")

// RegistryTokenizers gives prompts' token ids from a tokenizer registry, as
// vLLM computes them: completions are encoded with add_special_tokens=true,
// chat requests rendered with the model's chat template and encoded with
// add_special_tokens=false (unless the request asks).
type RegistryTokenizers struct {
	Registry *tokenizer.Registry
	Chats    *chat.Registry // nil: chat requests are routed by load; else over Registry
}

// AppendTokens implements Tokenizers. It looks the model's tokenizer up
// once, and for a chat request renders the template Chats holds for the
// model and encodes the prompt with that tokenizer.
func (t RegistryTokenizers) AppendTokens(dst []uint32, base string, p *Parsed) ([]uint32, error) {
	tk, err := t.Registry.For(base)
	if errors.Is(err, tokenizer.ErrUnknownModel) {
		return dst, fmt.Errorf("%w: %s", ErrNoTokenizer, base)
	}
	if err != nil {
		return dst, err
	}
	if p.Chat == nil {
		return tk.AppendEncode(dst, p.Prompt, true)
	}
	if t.Chats == nil {
		return dst, errNoChat
	}
	if p.chatErr != nil {
		return dst, p.chatErr
	}
	tmpl, err := t.Chats.For(base)
	if err != nil {
		return dst, err
	}
	return tmpl.AppendEncode(dst, tk, p.Chat)
}
