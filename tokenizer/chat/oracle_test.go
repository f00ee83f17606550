package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// chatTemplate is one real template under test: the model whose
// tokenizer_config.json gives the special tokens (and the template, when
// file is empty) and an optional vLLM example template file.
type chatTemplate struct {
	name, model, file string
}

var chatTemplates = []chatTemplate{
	{"qwen3", "qwen3", ""},
	{"deepseek_v3", "deepseek_v3", ""},
	{"gemma3", "gemma3", ""},
	{"llama3_1", "llama3_1", ""},
	{"hermes", "qwen3", "tool_chat_template_hermes.jinja"},
	{"qwen3coder", "qwen3", "tool_chat_template_qwen3coder.jinja"},
	{"granite", "qwen3", "tool_chat_template_granite.jinja"},
	{"llama3.1_json", "llama3_1", "tool_chat_template_llama3.1_json.jinja"},
	{"llama3.2_pythonic", "llama3_1", "tool_chat_template_llama3.2_pythonic.jinja"},
	{"mistral", "llama2", "tool_chat_template_mistral.jinja"},
	{"deepseek_r1", "deepseek_v3", "tool_chat_template_deepseekr1.jinja"},
	{"gpt-oss", "gptoss", "gpt-oss.jinja"},
}

type conversationCase struct {
	Name    string          `json:"name"`
	Request json.RawMessage `json:"request"`
}

func loadConversations(t *testing.T) []conversationCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []conversationCase
	if err := json.Unmarshal(data, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

func loadTemplateChat(t *testing.T, ct chatTemplate) (*Template, string) {
	t.Helper()
	dir := oracle.ModelDir(t, ct.model)
	override := ""
	if ct.file != "" {
		b, err := os.ReadFile(filepath.Join("testdata", ct.file))
		if err != nil {
			t.Fatal(err)
		}
		override = string(b)
	}
	c, err := Load(dir, override)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	return c, filepath.Join(dir, "tokenizer_config.json")
}

// TestChatTemplatesAgainstJinja2 renders every conversation with every
// real template in Go and with jinja2 plus vLLM's preprocessing: the
// prompts must be byte-identical, or both sides must fail.
func TestChatTemplatesAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	convs := loadConversations(t)
	type job struct {
		tmpl string
		conv conversationCase
		chat *Template
	}
	var jobs []job
	var reqs []any
	for _, ct := range chatTemplates {
		c, cfg := loadTemplateChat(t, ct)
		for _, cv := range convs {
			jobs = append(jobs, job{ct.name, cv, c})
			reqs = append(reqs, map[string]any{"template": c.Template(), "chat": cv.Request, "config": cfg, "now": "2026-03-07T15:04:05"})
		}
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	same, bothFail := 0, 0
	rendered := map[string]int{}
	for i, j := range jobs {
		req, err := ParseRequest(j.conv.Request)
		if err != nil {
			t.Fatalf("%s: ParseRequest: %v", j.conv.Name, err)
		}
		out, err := j.chat.renderAt(req, oracleTime)
		if d := pyoracle.Check(out, err, res[i]); d != "" {
			t.Errorf("%s × %s:\n%s", j.tmpl, j.conv.Name, d)
			continue
		}
		if err != nil {
			bothFail++
		} else {
			same++
			rendered[j.tmpl]++
		}
	}
	t.Logf("%d templates × %d conversations: %d byte-identical, %d fail on both sides", len(chatTemplates), len(convs), same, bothFail)
	// Agreement by failing on both sides proves little: every template must
	// render at least 30 of the conversations.
	for _, ct := range chatTemplates {
		t.Logf("%s: %d of %d rendered", ct.name, rendered[ct.name], len(convs))
		if rendered[ct.name] < 30 {
			t.Errorf("%s rendered only %d of %d conversations; want at least 30", ct.name, rendered[ct.name], len(convs))
		}
	}
}

// oracleTime is the clock both sides use for strftime_now.
var oracleTime = time.Date(2026, 3, 7, 15, 4, 5, 0, time.UTC)

func (c *Template) renderAt(req *Request, now time.Time) (string, error) {
	return c.renderWith(req, jinja.RenderOptions{Now: func() time.Time { return now }})
}

// TestChatTokensEndToEnd checks the whole chain for qwen3: Go render and
// encode equal jinja2's render encoded by the Rust tokenizers with
// add_special_tokens=false.
func TestChatTokensEndToEnd(t *testing.T) {
	o := pyoracle.Get(t)
	c, cfg := loadTemplateChat(t, chatTemplate{"qwen3", "qwen3", ""})
	tok := loadModel(t, "qwen3")
	var reqs []any
	var parsed []*Request
	for _, cv := range loadConversations(t) {
		req, err := ParseRequest(cv.Request)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, req)
		reqs = append(reqs, map[string]any{"template": c.Template(), "chat": cv.Request, "config": cfg})
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	var idx []int
	for i, r := range res {
		if r.Out != nil {
			texts, idx = append(texts, *r.Out), append(idx, i)
		}
	}
	want := oracle.IDs(t, oracle.ModelDir(t, "qwen3"), texts)
	for n, i := range idx {
		got, err := c.Encode(tok, parsed[i])
		if err != nil {
			t.Errorf("conversation %d: Encode: %v", i, err)
			continue
		}
		w := want[n][0]
		if parsed[i].AddSpecialTokens {
			w = want[n][1]
		}
		if d := oracle.Diff(got, w); d != "" {
			t.Errorf("conversation %d: %s", i, d)
		}
	}
	if len(idx) < 30 || !slices.ContainsFunc(texts, func(s string) bool { return len(s) > 2000 }) {
		t.Errorf("only %d conversations rendered; want at least 30 including a long one", len(idx))
	}
}
