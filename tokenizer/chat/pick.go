package chat

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// names lists the names of named templates, sorted.
func names(named map[string]string) string {
	if len(named) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(named)), ", ")
}

// from names where an override came from, for errors.
func (c *Template) from() string {
	if c.source == "" {
		return ""
	}
	return " (" + c.source + ")"
}

// configTemplate reads tokenizer_config.json's chat_template: a string, or
// a list of {"name", "template"} whose "default" entry a request uses
// unless it has tools and a "tool_use" entry exists (transformers'
// get_chat_template).
func configTemplate(raw json.RawMessage) (string, map[string]string, error) {
	if isNull(raw) {
		return "", nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", nil, fmt.Errorf("tokenizer: tokenizer_config.json: chat_template: %w", err)
	}
	named := make(map[string]string, len(list))
	for _, n := range list {
		named[n.Name] = n.Template
	}
	return named["default"], named, nil
}

// Check returns why a request without a chat template of its own cannot
// be rendered (wrapping ErrNoChatTemplate), nil when it can.
func (c *Template) Check() error {
	_, err := c.pick(&Request{})
	return err
}

// pick returns the template a request renders with, as vLLM and
// transformers choose it: the request's chat_template (the name of one
// of the model's named templates, or a template), else the configured or
// the model's template; with named templates and no override, "tool_use"
// for a request with tools when there is one, else "default".
func (c *Template) pick(req *Request) (string, error) {
	if req.ChatTemplate != "" {
		if t, ok := c.named[req.ChatTemplate]; ok {
			return t, nil
		}
		return req.ChatTemplate, nil
	}
	src := c.template
	if req.Tools != nil && c.toolUse != "" {
		src = c.toolUse
	}
	if src == "" {
		if c.named != nil {
			return "", fmt.Errorf("%w: tokenizer_config.json has named chat templates but none called \"default\"", ErrNoChatTemplate)
		}
		return "", ErrNoChatTemplate
	}
	return src, nil
}
