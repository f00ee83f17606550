package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/chat"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

func TestKindOfAgentAPIs(t *testing.T) {
	for path, want := range map[string]Kind{
		"/v1/messages":               KindMessages,
		"/v1/messages?beta=true":     KindMessages,
		"/v1/responses":              KindResponses,
		"/v1/responses/":             KindResponses,
		"/v1/messages/count_tokens":  KindOther,
		"/v1/responses/resp_1":       KindOther,
		"/v1/responses/resp_1/input": KindOther,
	} {
		if got := KindOf(path); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", path, got, want)
		}
	}
}

// roles are the roles of a converted request's messages.
func roles(req *chat.Request) []string {
	var out []string
	for _, m := range req.Messages {
		r, _ := m.(*jinja.Dict).Get("role")
		out = append(out, r.(string))
	}
	return out
}

func TestParseMessages(t *testing.T) {
	p, err := Parse(KindMessages, []byte(`{"model":"m","max_tokens":64,"stream":true,"cache_salt":"s",
		"system":[{"type":"text","text":"You code."}],
		"messages":[{"role":"user","content":"fix it"},
		 {"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"t1","name":"read","input":{"path":"a.go"}}]},
		 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"package a"},{"type":"text","text":"go on"}]}],
		"tools":[{"name":"read","input_schema":{"properties":{}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "m" || !p.Stream || p.CacheSalt != "s" || p.chatErr != nil {
		t.Fatalf("Parse = %+v", p)
	}
	want := []string{"system", "user", "assistant", "tool", "user"}
	if got := roles(p.Chat); !equalStrings(got, want) {
		t.Errorf("roles = %v, want %v", got, want)
	}
	if !p.Chat.AddGenerationPrompt || p.Chat.Tools == nil || len(p.Chat.Tools.Items) != 1 {
		t.Errorf("request = %+v", p.Chat)
	}
}

func TestParseResponses(t *testing.T) {
	p, err := Parse(KindResponses, []byte(`{"instructions":"You code.","previous_response_id":"resp_9",
		"input":[{"role":"user","content":"fix it"},
		 {"type":"function_call","call_id":"c1","name":"read","arguments":"{}"},
		 {"type":"function_call_output","call_id":"c1","output":"package a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "" || p.PreviousResponseID != "resp_9" || p.chatErr != nil {
		t.Fatalf("Parse = %+v", p)
	}
	want := []string{"system", "user", "assistant", "tool"}
	if got := roles(p.Chat); !equalStrings(got, want) {
		t.Errorf("roles = %v, want %v", got, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParseAgentRefusals: bodies vLLM's schemas refuse get a 400 naming the
// member; bodies vLLM accepts but renders as kvrouter cannot know are
// routed by load (the parse succeeds, the chat input cannot be rendered).
func TestParseAgentRefusals(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct {
		kind  Kind
		body  string
		param string // "" when accepted but not rendered exactly
	}{
		{KindMessages, `{"model":"m",` + msgs + `}`, "max_tokens"},
		{KindMessages, `{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens"},
		{KindMessages, `{"model":"m","max_tokens":1.5,` + msgs + `}`, "max_tokens"},
		{KindMessages, `{"model":"m","max_tokens":9}`, "messages"},
		{KindMessages, `{"model":"m","max_tokens":9,"messages":[{"role":"tool","content":"x"}]}`, "messages[0].role"},
		{KindMessages, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"video"}]}]}`, "messages[0].content[0].type"},
		{KindMessages, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":7}]}`, "messages[0].content"},
		{KindMessages, `{"model":"m","max_tokens":9,"system":3,` + msgs + `}`, "system"},
		{KindMessages, `{"model":"m","max_tokens":9,"tools":[{"name":"t"}],` + msgs + `}`, "tools[0].input_schema"},
		{KindMessages, `{"model":"m","max_tokens":9,"tool_choice":{"type":"tool"},` + msgs + `}`, "tool_choice.name"},
		{KindMessages, `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},` + msgs + `}`, ""},
		{KindMessages, `{"model":"m","max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":1024},` + msgs + `}`, "thinking.budget_tokens"},
		{KindMessages, `{"model":"m","max_tokens":9,"output_config":{"effort":"huge"},` + msgs + `}`, "output_config.effort"},
		{KindResponses, `{"model":"m"}`, "input"},
		{KindResponses, `{"model":"m","input":3}`, "input"},
		{KindResponses, `{"model":"m","input":[{"type":"function_call","name":"f"}]}`, "input[0].call_id"},
		{KindResponses, `{"model":"m","input":"hi","instructions":5}`, "instructions"},
		{KindResponses, `{"model":"m","input":"hi","reasoning":{"effort":"max"}}`, "reasoning.effort"},
		{KindResponses, `{"model":"m","input":"hi","previous_response_id":7}`, "previous_response_id"},
	} {
		p, err := Parse(tt.kind, []byte(tt.body))
		if tt.param == "" {
			if err != nil || p.Chat == nil {
				t.Errorf("Parse(%v, %s) = %v, want it accepted", tt.kind, tt.body, err)
			}
			continue
		}
		e := AsError(err)
		if e == nil || e.Status != http.StatusBadRequest || e.Param != tt.param {
			t.Errorf("Parse(%v, %s) = %v, want a 400 about %q", tt.kind, tt.body, err, tt.param)
		}
	}
	for _, tt := range []struct {
		kind Kind
		body string
	}{
		{KindMessages, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}]}`},
		{KindMessages, `{"model":"m","max_tokens":9,"messages":[{"role":"assistant","content":[{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}]}`},
		{KindResponses, `{"model":"m","input":[{"type":"web_search_call","id":"w"}]}`},
		{KindResponses, `{"model":"m","input":[{"type":"reasoning","encrypted_content":"zz"}]}`},
	} {
		p, err := Parse(tt.kind, []byte(tt.body))
		if err != nil || p.Chat == nil || !errors.Is(p.chatErr, chat.ErrNotExact) {
			t.Errorf("Parse(%v, %s) = %+v, %v: want accepted and routed by load", tt.kind, tt.body, p, err)
		}
	}
}

func TestErrorBodyShapes(t *testing.T) {
	e := badRequest("max_tokens", "max_tokens is required")
	var anthropic struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(e.Body("/v1/messages"), &anthropic); err != nil {
		t.Fatal(err)
	}
	if anthropic.Type != "error" || anthropic.Error.Type != "invalid_request_error" || anthropic.Error.Message != "max_tokens is required" {
		t.Errorf("Anthropic error = %+v", anthropic)
	}
	var openai struct {
		Error struct{ Message, Type string }
	}
	if err := json.Unmarshal(e.Body("/v1/responses"), &openai); err != nil || openai.Error.Type != "invalid_request_error" {
		t.Errorf("OpenAI error = %+v, %v", openai, err)
	}
	if got := string(notFound("x").Body("/v1/messages")); got != `{"type":"error","error":{"type":"not_found_error","message":"x"}}` {
		t.Errorf("404 = %s", got)
	}
}

func FuzzParseAgent(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","data":"AA"}}]}]}]}`,
		`{"model":"m","max_tokens":9,"system":[{"type":"text","text":"s"}],"messages":[{"role":"system","content":"a"},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"i","name":"n","input":{}}]}]}`,
		`{"input":[{"type":"reasoning","summary":[{"text":"r"}]},{"type":"function_call","call_id":"c","name":"n","arguments":"{}"},{"role":"assistant","content":[{"type":"output_text","text":"t"}],"status":"in_progress"}],"tools":[{"type":"function","name":"n"}]}`,
		`{"input":"hi","instructions":"be brief","reasoning":{"effort":"low"}}`, `[`, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, k := range []Kind{KindMessages, KindResponses} {
			p, err := Parse(k, []byte(body))
			if err != nil {
				if AsError(err) == nil {
					t.Fatalf("Parse(%v, %q) = %v, want nil or a *Error", k, body, err)
				}
				continue
			}
			if p.Chat == nil || (k == KindMessages && p.Model == "") {
				t.Fatalf("Parse(%v, %q) = %+v without error", k, body, p)
			}
			if p.chatErr == nil && len(roles(p.Chat)) != len(p.Chat.Messages) { // roles panics unless each is a dict with a string role
				t.Fatalf("Parse(%v, %q): messages %v", k, body, p.Chat.Messages)
			}
		}
	})
}
