package chat

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// jinjaList is an empty list of tools.
func jinjaList() *jinja.List { return jinja.NewList() }

func TestNewChatTemplateResolution(t *testing.T) {
	named := []byte(`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}], "bos_token": {"content": "<s>"}}`)
	tests := []struct {
		name           string
		cfg            []byte
		file, override string
		want           string
	}{
		{"config string", []byte(`{"chat_template": "C"}`), "", "", "C"},
		{"config named default", named, "", "", "D"},
		{"file over config", []byte(`{"chat_template": "C"}`), "F", "", "F"},
		{"override over file", []byte(`{"chat_template": "C"}`), "F", "O", "O"},
		{"none", nil, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg, tt.file, tt.override)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Template(); got != tt.want {
				t.Errorf("Template() = %q, want %q", got, tt.want)
			}
		})
	}
	// Named templates without "default": a request must name one.
	c, err := New([]byte(`{"chat_template": [{"name": "x", "template": "T"}]}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Render(&Request{}); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("Render(no default, no chat_template) = %v, want ErrNoChatTemplate", err)
	}
	if got, err := c.Render(&Request{ChatTemplate: "x"}); got != "T" || err != nil {
		t.Errorf("Render(chat_template x) = %q, %v, want T", got, err)
	}
}

// TestNamedTemplates: as transformers' get_chat_template, a request with
// tools uses "tool_use", a name given by the request or the configuration
// stands for its template, and a configured template is used as given.
func TestNamedTemplates(t *testing.T) {
	named := []byte(`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}, {"name": "rag", "template": "G"}]}`)
	tools := &Request{Tools: jinjaList()}
	tests := []struct {
		name     string
		override string
		req      *Request
		want     string
	}{
		{"default", "", &Request{}, "D"},
		{"tools", "", tools, "T"},
		{"request names one", "", &Request{ChatTemplate: "rag"}, "G"},
		{"request template", "", &Request{ChatTemplate: "R"}, "R"},
		{"override by name", "rag", &Request{}, "G"},
		{"override by name, tools", "rag", tools, "G"},
		{"override text", "O", tools, "O"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewWith(named, "", Options{Template: tt.override, Source: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := c.Render(tt.req); got != tt.want || err != nil {
				t.Errorf("Render = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
}

func TestChatRender(t *testing.T) {
	cfg := []byte(`{"chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ x }}", "bos_token": {"content": "<s>"}, "eos_token": null}`)
	c, err := New(cfg, "", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, body, want string
	}{
		{"default generation prompt", `{"messages": [{"role": "user", "content": "hi"}]}`, "<s>[user:hi]>"},
		{"parts joined", `{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "add_generation_prompt": false}`, "<s>[user:a\nb]"},
		{"kwargs", `{"messages": [], "chat_template_kwargs": {"x": "K"}}`, "<s>>K"},
		{"request template", `{"messages": [], "chat_template": "R{{ messages|length }}"}`, "R0"},
		{"continue final", `{"messages": [{"role": "assistant", "content": "go on"}], "add_generation_prompt": false, "continue_final_message": true}`, "<s>[assistant:go on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Render(req)
			if err != nil || got != tt.want {
				t.Errorf("Render(%s) = %q, %v, want %q", tt.body, got, err, tt.want)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	for _, body := range []string{
		`[]`, `{}`, `{"messages": {}}`, `{"messages": [], "tools": {}}`,
		`{"messages": [], "add_generation_prompt": "yes"}`, `{"messages": [], "chat_template": 1}`,
		`{"messages": [], "chat_template_kwargs": []}`, `{"messages": [`,
		`{"messages": []} x`, `{"messages": [], "unread": [1,]}`, `{"messages": [{"role": "user", "n": 99999999999999999999}]}`,
		`{"messages": [], "tools": [` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `]}`,
	} {
		if _, err := ParseRequest([]byte(body)); err == nil {
			t.Errorf("ParseRequest(%s) = nil error, want one", body)
		}
	}
}

func TestChatRenderErrors(t *testing.T) {
	c, err := New(nil, "", "{{ messages[0].content }}")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"messages": [1]}`,
		`{"messages": [{"role": 1}]}`,
		`{"messages": [{"role": "user", "content": [{"type": "hologram"}]}]}`,
		`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}, 1]}]}`,
		`{"messages": [{"role": "user", "content": "x"}], "continue_final_message": true}`,
	} {
		req, err := ParseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := c.Render(req); err == nil {
			t.Errorf("Render(%s) = %q, want an error", body, out)
		}
	}
	empty, _ := New(nil, "", "")
	req, _ := ParseRequest([]byte(`{"messages": []}`))
	if _, err := empty.Render(req); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("Render without template = %v, want ErrNoChatTemplate", err)
	}
}
