package chat

import (
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
	overrides map[string]string
	mu        struct {
		sync.Mutex
		m map[string]*Template // by base model name
	}
}

// NewRegistry returns the chat renderers of the registry's models; overrides
// maps base model names to a template that replaces the model's own (as
// vLLM's --chat-template).
func NewRegistry(reg *tokenizer.Registry, overrides map[string]string) *Registry {
	c := &Registry{reg: reg, overrides: overrides}
	c.mu.m = map[string]*Template{}
	return c
}

// For returns the chat renderer of a model.
func (c *Registry) For(model string) (*Template, error) {
	name, err := c.reg.Base(model)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	ch, ok := c.mu.m[name]
	c.mu.Unlock()
	if ok {
		return ch, nil
	}
	dir, err := c.reg.Dir(name)
	if err != nil {
		return nil, err
	}
	if ch, err = Load(dir, c.overrides[name]); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.m) >= maxChats {
		for k := range c.mu.m { // drop an arbitrary entry
			delete(c.mu.m, k)
			break
		}
	}
	c.mu.m[name] = ch
	return ch, nil
}
