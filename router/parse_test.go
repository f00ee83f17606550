package router

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/chat"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

func TestKindOf(t *testing.T) {
	for path, want := range map[string]Kind{
		"/v1/completions":       KindCompletion,
		"/v1/completions?x=1":   KindCompletion,
		"/v1/chat/completions":  KindChat,
		"/v1/chat/completions/": KindChat,
		"/v1/embeddings":        KindOther,
		"/v1/models":            KindOther,
		"/v1/chat/completionsX": KindOther,
		"":                      KindOther,
	} {
		if got := KindOf(path); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestParseCompletion(t *testing.T) {
	tests := []struct {
		body       string
		wantPrompt string
		wantTokens []uint32
		wantSalt   string
		wantStream bool
	}{
		{body: `{"model":"m","prompt":"hello"}`, wantPrompt: "hello"},
		{body: `{"model":"m","prompt":["first","second"]}`, wantPrompt: "first"},
		{body: `{"model":"m","prompt":[1,2,4294967295]}`, wantTokens: []uint32{1, 2, 4294967295}},
		{body: `{"model":"m","prompt":[[7,8],[9]]}`, wantTokens: []uint32{7, 8}},
		{body: `{"model":"m","prompt":"x","cache_salt":"s","stream":true}`, wantPrompt: "x", wantSalt: "s", wantStream: true},
		{body: ` {"model":"m","prompt":"x","unknown":{"deep":[1]}} `, wantPrompt: "x"},
	}
	for _, tt := range tests {
		p, err := Parse(KindCompletion, []byte(tt.body))
		if err != nil {
			t.Errorf("Parse(%s) = %v", tt.body, err)
			continue
		}
		if p.Model != "m" || p.Prompt != tt.wantPrompt || !slices.Equal(p.PromptTokens, tt.wantTokens) || p.CacheSalt != tt.wantSalt || p.Stream != tt.wantStream {
			t.Errorf("Parse(%s) = %+v, want prompt %q tokens %v salt %q stream %v", tt.body, p, tt.wantPrompt, tt.wantTokens, tt.wantSalt, tt.wantStream)
		}
	}
}

func TestParseChat(t *testing.T) {
	p, err := Parse(KindChat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],
		"tools":[{"type":"function"}],"chat_template_kwargs":{"enable_thinking":false},"chat_template":"{{ messages }}",
		"add_generation_prompt":false,"continue_final_message":true,"add_special_tokens":true,"reasoning_effort":"low"}`))
	if err != nil {
		t.Fatal(err)
	}
	c := p.Chat
	if c == nil {
		t.Fatalf("Parse(chat).Chat = nil, want the template's input")
	}
	thinking, _ := c.Kwargs.Get("enable_thinking")
	if got := printJSON(c.Messages); got != `[{"role": "user", "content": "hi"}]` {
		t.Errorf("Parse(chat).Chat.Messages = %s, want the message as sent", got)
	}
	if c.Tools == nil || printJSON(c.Tools.Items) != `[{"type": "function"}]` || c.Documents != nil {
		t.Errorf("Parse(chat).Chat tools, documents = %v, %v, want the tool and none", c.Tools, c.Documents)
	}
	if c.AddGenerationPrompt || !c.ContinueFinalMessage || !c.AddSpecialTokens || thinking != false || c.ChatTemplate != "{{ messages }}" {
		t.Errorf("Parse(chat).Chat = %+v, want the flags, kwargs and template as sent", c)
	}
	p, err = Parse(KindChat, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"documents":null}`))
	if err != nil || !p.Chat.AddGenerationPrompt || p.Chat.ContinueFinalMessage || p.Chat.AddSpecialTokens || p.Chat.Kwargs != nil || p.Chat.Tools != nil {
		t.Fatalf("Parse(chat defaults) = %+v, %v; want add_generation_prompt true by default", p.Chat, err)
	}
}

// TestParseChatRepeatedKeys: the last of repeated keys wins, at the top
// level and in messages, as in Python's json.loads.
func TestParseChatRepeatedKeys(t *testing.T) {
	p, err := Parse(KindChat, []byte(`{"messages":"x","model":"a","messages":[{"role":"user","role":"tool","content":"hi"}],"model":"b"}`))
	if err != nil || p.Model != "b" || printJSON(p.Chat.Messages) != `[{"role": "tool", "content": "hi"}]` {
		t.Fatalf("Parse(repeated keys) = %+v, %v, want model b and the last role", p, err)
	}
}

// TestParseChatBeyondJinjaLimits: values the template engine cannot hold
// (nesting past its depth, integers past int64) are valid JSON that vLLM
// may take: Parse accepts the request and keeps why it cannot be rendered
// for AppendTokens, so that it is routed by load (test/'s hostile requests
// check that end to end).
func TestParseChatBeyondJinjaLimits(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi","n":99999999999999999999}]}`,
	} {
		p, err := Parse(KindChat, []byte(body))
		if err != nil || p.Chat == nil || !errors.Is(p.chatErr, jinja.ErrLimit) {
			t.Errorf("Parse(%.60s...) = %+v, %v, want a chat request that cannot be rendered", body, p, err)
		}
	}
}

// checkSameAsParseRequest checks that Parse builds the template's input
// that kvrouter render's chat.ParseRequest reads from the same body.
func checkSameAsParseRequest(t *testing.T, body string, got *chat.Request) {
	t.Helper()
	want, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatalf("chat.ParseRequest(%q) = %v, but Parse accepted it", body, err)
	}
	show := func(r *chat.Request) string {
		var tools []jinja.Value
		if r.Tools != nil {
			tools = r.Tools.Items
		}
		var kwargs jinja.Value
		if r.Kwargs != nil {
			kwargs = r.Kwargs
		}
		return fmt.Sprintf("%s %s %s %s %q %v %v %v", printJSON(r.Messages), printJSON(tools), printJSON([]jinja.Value{r.Documents}),
			printJSON([]jinja.Value{kwargs}), r.ChatTemplate, r.AddGenerationPrompt, r.ContinueFinalMessage, r.AddSpecialTokens)
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("Parse(chat, %q).Chat = %s, want %s as chat.ParseRequest reads it", body, g, w)
	}
}

// printJSON prints values as the template's tojson would.
func printJSON(vs []jinja.Value) string {
	s, err := jinja.ToJSON(jinja.NewList(vs...))
	if err != nil {
		return err.Error()
	}
	return s
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		kind      Kind
		body      string
		wantParam string
	}{
		{KindCompletion, `not json`, ""},
		{KindCompletion, `{"model":"m","prompt":"x"} trailing`, ""},
		{KindCompletion, "{\"model\":\"m\",\"prompt\":\"\xff\"}", ""},
		{KindCompletion, `[1,2]`, ""},
		{KindCompletion, `{"prompt":"x"}`, "model"},
		{KindCompletion, `{"model":"","prompt":"x"}`, "model"},
		{KindCompletion, `{"model":7,"prompt":"x"}`, "model"},
		{KindCompletion, `{"model":"m"}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":{}}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":[]}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":[-1]}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":[1.5]}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":[4294967296]}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":["a",1]}`, "prompt"},
		{KindCompletion, `{"model":"m","prompt":"x","cache_salt":1}`, "cache_salt"},
		{KindCompletion, `{"model":"m","prompt":"x","stream":"yes"}`, "stream"},
		{KindChat, `{"model":"m"}`, "messages"},
		{KindChat, `{"model":"m","messages":"hi"}`, "messages"},
		{KindChat, `{"model":"m","messages":[]}`, "messages"},
		{KindChat, `{"model":"m","messages":["hi"]}`, "messages"},
		{KindChat, `{"model":"m","messages":[{"content":"hi"}]}`, "messages[0].role"},
		{KindChat, `{"model":"m","messages":[{"role":"user"}],"tools":{}}`, "tools"},
		{KindChat, `{"model":"m","messages":[{"role":"user"}],"chat_template_kwargs":[]}`, "chat_template_kwargs"},
		{KindChat, `{"model":"m","messages":[{"role":"user"}],"add_generation_prompt":1}`, "add_generation_prompt"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.kind, []byte(tt.body))
		e := AsError(err)
		if e == nil || e.Status != http.StatusBadRequest || e.Param != tt.wantParam {
			t.Errorf("Parse(%v, %q) = %v, want a 400 about %q", tt.kind, tt.body, err, tt.wantParam)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello"}`, `{"model":"m","prompt":[[1],[2]]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"model":"m","prompt":["a"]}`, `[`, `{"model":null}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, k := range []Kind{KindCompletion, KindChat} {
			p, err := Parse(k, []byte(body))
			if err != nil && AsError(err) == nil {
				t.Fatalf("Parse(%v, %q) = %v, want nil or a *Error", k, body, err)
			}
			if err == nil && (p.Model == "" || (k == KindChat) != (p.Chat != nil)) {
				t.Fatalf("Parse(%v, %q) = %+v without error", k, body, p)
			}
			if err == nil && k == KindChat && p.chatErr == nil {
				checkSameAsParseRequest(t, body, p.Chat)
			}
		}
	})
}
