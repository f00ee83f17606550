package chat

import (
	"fmt"
	"sync"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// maxChats bounds the chat renderers a Registry keeps.
const maxChats = 64

// Registry maps model names (base, alias or LoRA adapter, as the Registry
// resolves them) to chat renderers, loading each model's template once. It
// is safe for concurrent use.
type Registry struct {
	reg       *tokenizer.Registry
	overrides map[string]Options
	mu        struct {
		sync.Mutex
		m map[string]chatEntry // by base model name
	}
}

// NewRegistry returns the chat renderers of the registry's models; overrides
// maps base model names to their chat options: a template that replaces
// the model's own (as vLLM's --chat-template), a content format.
func NewRegistry(reg *tokenizer.Registry, overrides map[string]Options) *Registry {
	c := &Registry{reg: reg, overrides: overrides}
	c.mu.m = map[string]chatEntry{}
	return c
}

// chatEntry is a model's renderer, or why it has none (its files are there
// but wrong: asked again, it would fail again).
type chatEntry struct {
	tmpl *Template
	err  error
}

// For returns the chat renderer of a model; its errors name the model.
func (c *Registry) For(model string) (*Template, error) {
	name, err := c.reg.Base(model)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	l, ok := c.mu.m[name]
	c.mu.Unlock()
	if ok {
		return l.tmpl, l.err
	}
	dir, err := c.reg.Dir(name)
	if err != nil {
		return nil, err
	}
	l.tmpl, l.err = LoadWith(dir, c.overrides[name])
	if l.err != nil {
		l.err = fmt.Errorf("model %q: %w", name, l.err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.m) >= maxChats {
		for k := range c.mu.m { // drop an arbitrary entry
			delete(c.mu.m, k)
			break
		}
	}
	c.mu.m[name] = l
	return l.tmpl, l.err
}
