package chat

import (
	"testing"
)

// FuzzNewWith reads tokenizer_config.json bytes as a hub or a mirror serves
// them (string, named or broken chat templates, special tokens of any
// shape): building a Template and rendering with it must never panic, and
// a Template built reports its template or why it has none.
func FuzzNewWith(f *testing.F) {
	for _, seed := range []string{
		`{"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", "bos_token": {"content": "<s>"}}`,
		`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`,
		`{"chat_template": [{"name": "x"}], "additional_special_tokens": ["<a>", {"content": "<b>"}, 3]}`,
		`{"chat_template": null, "eos_token": 7}`,
		`{"chat_template": {"name": "default"}}`,
		`[]`, `{`, ``,
	} {
		f.Add([]byte(seed), "", "tool_use")
	}
	f.Fuzz(func(t *testing.T, cfg []byte, override, named string) {
		for _, opt := range []Options{{}, {Template: override}, {Named: named}, {ContentFormat: FormatOpenAI}} {
			c, err := NewWith(cfg, "", opt)
			if err != nil {
				continue
			}
			if err := c.Check(); err == nil && c.Template() == "" {
				t.Errorf("NewWith(%q, %+v): Check passes without a template", cfg, opt)
			}
			for _, req := range []*Request{{}, {Tools: jinjaList()}, {ChatTemplate: named}} {
				_, _ = c.Render(req)
			}
		}
	})
}
