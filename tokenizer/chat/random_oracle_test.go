package chat

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// convGen builds random chat requests: roles in any order, string or part
// content, tool calls with dict or string arguments, tools, kwargs.
type convGen struct{ rng *rand.Rand }

var genTexts = []string{
	"", " ", "Hello", "  padded  ", "multi\nline\n\ntext", "ünïcödé 日本語 😀", "<think>\nhmm\n</think>\n\nanswer",
	"quote \" and ' and \\", "{{ not a template }}", "a</think>b", "tab\there", "<|im_end|>",
}

func (g *convGen) text() string { return genTexts[g.rng.Intn(len(genTexts))] }

func (g *convGen) content() any {
	switch g.rng.Intn(5) {
	case 0:
		return []any{map[string]any{"type": "text", "text": g.text()}, map[string]any{"type": "text", "text": g.text()}}
	case 1:
		return nil
	case 2:
		return []any{map[string]any{"type": "refusal", "refusal": g.text()}, map[string]any{"type": "text", "text": nil}}
	}
	return g.text()
}

func (g *convGen) toolCall(i int) any {
	var args any = map[string]any{"city": g.text(), "days": g.rng.Intn(5), "deep": map[string]any{"x": []any{1.5, nil, true}}}
	switch g.rng.Intn(4) {
	case 0, 1:
		b, _ := json.Marshal(args)
		args = string(b)
	case 2:
		args = []any{"{not json", "", "[1]", nil}[g.rng.Intn(4)]
	}
	return map[string]any{"id": fmt.Sprintf("c%d", i), "type": "function", "function": map[string]any{"name": "get_weather", "arguments": args}}
}

func (g *convGen) message(i int) any {
	roles := []string{"user", "user", "assistant", "system", "tool", "developer"}
	m := map[string]any{"role": roles[g.rng.Intn(len(roles))], "content": g.content()}
	switch m["role"] {
	case "assistant":
		if g.rng.Intn(8) == 0 {
			m["tool_calls"] = []any{}
		} else if g.rng.Intn(3) == 0 {
			m["tool_calls"] = []any{g.toolCall(i)}
			if g.rng.Intn(3) == 0 {
				m["tool_calls"] = append(m["tool_calls"].([]any), g.toolCall(i+100))
			}
		}
		if g.rng.Intn(4) == 0 {
			m["reasoning_content"] = g.text()
		}
	case "tool":
		m["tool_call_id"] = fmt.Sprintf("c%d", i)
		if g.rng.Intn(2) == 0 {
			m["name"] = "get_weather"
		}
	}
	return m
}

func (g *convGen) request() map[string]any {
	n := 1 + g.rng.Intn(6)
	msgs := make([]any, n)
	for i := range msgs {
		msgs[i] = g.message(i)
	}
	req := map[string]any{"messages": msgs}
	if g.rng.Intn(3) == 0 {
		req["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "get_weather", "description": g.text(),
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"city": map[string]any{"type": "string", "description": "City"},
				"days": map[string]any{"type": []any{"integer", "null"}, "description": "Days"},
			}, "required": []any{"city"}},
		}}}
	}
	switch g.rng.Intn(4) {
	case 0:
		req["add_generation_prompt"] = false
	case 1:
		req["add_generation_prompt"] = false
		req["continue_final_message"] = true
	}
	if g.rng.Intn(3) == 0 {
		req["chat_template_kwargs"] = map[string]any{"enable_thinking": g.rng.Intn(2) == 0}
	}
	if g.rng.Intn(3) == 0 {
		req["reasoning_effort"] = []string{"none", "low", "high"}[g.rng.Intn(3)]
	}
	return req
}

// TestRandomChatsAgainstJinja2 renders random conversations with every real
// template in Go and with jinja2 plus vLLM's preprocessing. CHATS=n runs n
// conversations per template (default 60).
func TestRandomChatsAgainstJinja2(t *testing.T) {
	pyoracle.Get(t)
	n := 60
	if v, err := strconv.Atoi(os.Getenv("CHATS")); err == nil {
		n = v
	}
	g := &convGen{rng: rand.New(rand.NewSource(3))}
	bodies := make([]oracleBody, n)
	for i := range bodies {
		bodies[i].key = "chat"
		bodies[i].json, _ = json.Marshal(g.request())
	}
	same, bad, total := templatesAgainstJinja2(t, bodies, func(b oracleBody) *Request {
		req, err := ParseRequest(b.json)
		if err != nil {
			t.Fatal(err)
		}
		return req
	})
	t.Logf("%d of %d renders byte-identical, %d differ, the rest fail on both sides", same, total, bad)
}

// oracleBody is a request body and the oracle's key for its API: chat,
// anthropic or responses.
type oracleBody struct {
	key  string
	json []byte
}

// templatesAgainstJinja2 renders every body with every real template, in
// Go (request gives its template input) and with the jinja2 oracle, and
// reports the first 10 differences: it returns the renders byte-identical,
// those that differ, and all.
func templatesAgainstJinja2(t *testing.T, bodies []oracleBody, request func(oracleBody) *Request) (same, bad, total int) {
	t.Helper()
	o := pyoracle.Get(t)
	var queries []any
	var chats []*Template
	for _, ct := range chatTemplates {
		c, cfg := loadTemplateChat(t, ct)
		chats = append(chats, c)
		for _, b := range bodies {
			queries = append(queries, map[string]any{"template": c.Template(), b.key: json.RawMessage(b.json), "config": cfg, "now": "2026-03-07T15:04:05"})
		}
	}
	res, err := o.Query(queries)
	if err != nil {
		t.Fatal(err)
	}
	for ti, c := range chats {
		for i, b := range bodies {
			out, err := c.renderAt(request(b), oracleTime)
			d := pyoracle.Check(out, err, res[ti*len(bodies)+i])
			switch {
			case d != "":
				if bad++; bad <= 10 {
					t.Errorf("%s × %s:\n%s", chatTemplates[ti].name, b.json, d)
				}
			case err == nil:
				same++
			}
		}
	}
	return same, bad, len(queries)
}
