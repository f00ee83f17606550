package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// overrideCase is a model's chat settings under test: the configured
// template (text or name), its content format, and whether the model's
// tokenizer_config.json has named templates.
type overrideCase struct {
	name   string
	opt    Options
	named  bool
	byName string // the request's chat_template ("": none)
}

// TestOverridesAgainstJinja2 renders every conversation under configured
// templates, content formats and named templates in Go and with jinja2
// plus vLLM's and transformers' template choice: the prompts must be
// byte-identical, or both sides must fail.
func TestOverridesAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	dir := oracle.ModelDir(t, "qwen3")
	cfgJSON, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	own, err := New(cfgJSON, "", "")
	if err != nil {
		t.Fatal(err)
	}
	hermes, granite := readTestdata(t, "tool_chat_template_hermes.jinja"), readTestdata(t, "tool_chat_template_granite.jinja")
	// gemma3's template reads a message's content as a string or as parts:
	// it renders in either format.
	gemma, err := Load(oracle.ModelDir(t, "gemma3"), "")
	if err != nil {
		t.Fatal(err)
	}
	both := gemma.Template()
	// repr prints each message's content as the template receives it.
	const repr = "{% for m in messages %}{{ m.role }}={{ m.content }}|{% endfor %}"
	named := map[string]string{"default": own.Template(), "tool_use": hermes, "granite": granite, "both": both}
	namedJSON := withNamedTemplates(t, cfgJSON, named)
	cases := []overrideCase{
		{name: "file, auto", opt: Options{Template: hermes, Source: "file"}},
		{name: "file, string", opt: Options{Template: hermes, Source: "file", ContentFormat: FormatString}},
		{name: "both, auto", opt: Options{Template: both, Source: "file"}},
		{name: "both, string", opt: Options{Template: both, Source: "file", ContentFormat: FormatString}},
		{name: "both, openai", opt: Options{Template: both, Source: "file", ContentFormat: FormatOpenAI}},
		{name: "repr, auto", opt: Options{Template: repr, Source: "text"}},
		{name: "repr, string", opt: Options{Template: repr, Source: "text", ContentFormat: FormatString}},
		{name: "repr, openai", opt: Options{Template: repr, Source: "text", ContentFormat: FormatOpenAI}},
		{name: "named", named: true},
		{name: "named, by name, openai", named: true, opt: Options{Template: "both", ContentFormat: FormatOpenAI}},
		{name: "named by config", named: true, opt: Options{Template: "granite", Source: "name"}},
		{name: "named by request", named: true, byName: "granite"},
		{name: "text by config, named by request", named: true, opt: Options{Template: hermes, Source: "file"}, byName: "tool_use"},
	}
	convs := loadConversations(t)
	var reqs []any
	type job struct {
		c    overrideCase
		conv conversationCase
		tmpl *Template
	}
	var jobs []job
	for _, c := range cases {
		cfg := cfgJSON
		if c.named {
			cfg = namedJSON
		}
		tmpl, err := NewWith(cfg, "", c.opt)
		if err != nil {
			t.Fatalf("%s: NewWith: %v", c.name, err)
		}
		for _, cv := range convs {
			chat := cv.Request
			if c.byName != "" {
				chat = withField(t, chat, "chat_template", c.byName)
			}
			q := map[string]any{"template": own.Template(), "chat": chat, "config": filepath.Join(dir, "tokenizer_config.json"), "now": "2026-03-07T15:04:05"}
			if c.named {
				q["named"] = named
			}
			if c.opt.Template != "" {
				q["override"] = c.opt.Template
			}
			if c.opt.ContentFormat != "" {
				q["content_format"] = string(c.opt.ContentFormat)
			}
			reqs = append(reqs, q)
			jobs = append(jobs, job{c, conversationCase{cv.Name, chat}, tmpl})
		}
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	rendered := map[string]int{}
	for i, j := range jobs {
		req, err := ParseRequest(j.conv.Request)
		if err != nil {
			t.Fatalf("%s: ParseRequest: %v", j.conv.Name, err)
		}
		out, err := j.tmpl.renderAt(req, oracleTime)
		if d := pyoracle.Check(out, err, res[i]); d != "" {
			t.Errorf("%s × %s:\n%s", j.c.name, j.conv.Name, d)
			continue
		}
		if err == nil {
			rendered[j.c.name]++
		}
	}
	for _, c := range cases {
		t.Logf("%s: %d of %d rendered", c.name, rendered[c.name], len(convs))
		if rendered[c.name] < 30 {
			t.Errorf("%s rendered only %d of %d conversations; want at least 30", c.name, rendered[c.name], len(convs))
		}
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withNamedTemplates is a tokenizer_config.json with named chat templates.
func withNamedTemplates(t *testing.T, cfgJSON []byte, named map[string]string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	var list []map[string]string
	for _, n := range []string{"default", "tool_use", "granite", "both"} {
		list = append(list, map[string]string{"name": n, "template": named[n]})
	}
	cfg["chat_template"] = list
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withField is a JSON object with one more member.
func withField(t *testing.T, obj json.RawMessage, key string, v any) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	m[key] = b
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
