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
	// Health is told which models' tokenizers and chat templates are
	// missing, and when they are back; nil: none.
	Health *Health
}

// Configured reports whether the model's tokenizer is configured (a
// directory, a hub repository or an alias): a model kvrouter is set up to
// route though no pod may serve it yet.
func (t RegistryTokenizers) Configured(model string) bool { return t.Registry.Configured(model) }

// AppendTokens implements Tokenizers. It looks the model's tokenizer up
// once, and for a chat request renders the template Chats holds for the
// model and encodes the prompt with that tokenizer, through the model's
// prefix cache when the registry keeps one.
func (t RegistryTokenizers) AppendTokens(dst []uint32, base string, p *Parsed) ([]uint32, error) {
	dst, _, _, err := t.appendTokensPrefix(dst, base, p, nil)
	return dst, err
}

// appendTokensPrefix is AppendTokens, also returning what the model's
// prefix cache reused and the cache (nil: none), telling progress (nil:
// none) of the ids final so far of a prompt encoded from its start.
func (t RegistryTokenizers) appendTokensPrefix(dst []uint32, base string, p *Parsed, progress tokenizer.Progress) ([]uint32, tokenizer.PrefixHit, *tokenizer.PrefixCache, error) {
	var none tokenizer.PrefixHit
	tk, err := t.Registry.For(base)
	if errors.Is(err, tokenizer.ErrUnknownModel) || errors.Is(err, tokenizer.ErrPending) {
		t.Health.Set(base, PartTokenizer, err)
		return dst, none, nil, fmt.Errorf("%w: %s: %w", ErrNoTokenizer, base, err)
	}
	if err != nil {
		return dst, none, nil, err
	}
	t.Health.Set(base, PartTokenizer, nil)
	text, special := p.Prompt, true
	if p.Chat != nil {
		if t.Chats == nil {
			return dst, none, nil, errNoChat
		}
		if p.chatErr != nil {
			return dst, none, nil, p.chatErr
		}
		tmpl, err := t.Chats.For(base)
		known := -1 // with media: the bytes of text rendered whatever the media
		switch {
		case err != nil:
		case p.Chat.HasMedia():
			text, known, err = tmpl.RenderMedia(p.Chat)
		default:
			text, err = tmpl.Render(p.Chat)
		}
		if chatMissing(err) {
			t.Health.Set(base, PartChatTemplate, err)
		}
		if err != nil {
			return dst, none, nil, err
		}
		if p.Chat.ChatTemplate == "" { // the model's own, or the configured one
			t.Health.Set(base, PartChatTemplate, nil)
		}
		special = p.Chat.AddSpecialTokens
		if known >= 0 {
			dst, err = appendMediaTokens(dst, tk, text, special, known)
			return dst, none, nil, err
		}
	}
	c := tk.Prefixes()
	if c == nil {
		dst, err = tk.AppendEncodeProgress(dst, text, special, progress)
		return dst, none, nil, err
	}
	dst, hit, err := c.AppendEncodeProgress(dst, text, special, progress)
	return dst, hit, c, err
}

// prefixStats implements prefixTokenizers.
func (t RegistryTokenizers) prefixStats() (tokenizer.PrefixStats, bool) {
	if t.Registry == nil || t.Registry.PrefixCacheBytes() == 0 {
		return tokenizer.PrefixStats{}, false
	}
	return t.Registry.PrefixStats(), true
}

// prefixTokenizers is a Tokenizers that encodes through prefix caches: the
// router then keeps each prompt's block hashes with its ids, and hashes
// only the blocks after the ids the next turn reuses.
type prefixTokenizers interface {
	Tokenizers
	appendTokensPrefix(dst []uint32, base string, p *Parsed, progress tokenizer.Progress) ([]uint32, tokenizer.PrefixHit, *tokenizer.PrefixCache, error)
	prefixStats() (tokenizer.PrefixStats, bool)
}

// appendMediaTokens appends the ids of a chat request with media content
// parts that vLLM computes before its first media token, and no others:
// the pods expand each media item into tokens the router cannot reproduce,
// and the blocks holding them hash with the media's own hash, so only the
// full blocks before them can match. text is the chat rendered by
// chat.Template.RenderMedia, known its bytes rendered whatever the media;
// tokenizer.AppendEncodeStable keeps the ids they fix. The prefix cache is
// bypassed.
func appendMediaTokens(dst []uint32, tk *tokenizer.Tokenizer, text string, special bool, known int) ([]uint32, error) {
	base := len(dst)
	dst, stable, err := tk.AppendEncodeStable(dst, text, special, known)
	if err != nil {
		return dst, err
	}
	return dst[:base+stable], nil
}
