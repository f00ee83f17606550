package chat

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// agentGen builds agent conversations in the Anthropic Messages and OpenAI
// Responses APIs: a system prompt, tools, turns of tool calls and results,
// reasoning, the odd empty or dropped block.
type agentGen struct{ rng *rand.Rand }

func (g *agentGen) pick(n int) int { return g.rng.Intn(n) }

func (g *agentGen) text() string { return genTexts[g.pick(len(genTexts))] }

func (g *agentGen) args() map[string]any {
	return map[string]any{"path": g.text(), "lines": g.pick(40), "opts": map[string]any{"deep": []any{1.5, nil, true}}}
}

func (g *agentGen) schema() map[string]any {
	s := map[string]any{"properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"}}
	if g.pick(2) == 0 {
		s = map[string]any{"type": "object", "properties": s["properties"]}
	}
	return s
}

func (g *agentGen) anthropicSystem() any {
	switch g.pick(4) {
	case 0:
		return nil
	case 1:
		return g.text() + "You are a coding agent."
	}
	blocks := []any{map[string]any{"type": "text", "text": "You are a coding agent.", "cache_control": map[string]any{"type": "ephemeral"}}}
	if g.pick(2) == 0 {
		blocks = append([]any{map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=1"}}, blocks...)
	}
	return append(blocks, map[string]any{"type": "text", "text": g.text()})
}

// anthropic is one Messages body: n turns of user, assistant tool use and
// user tool results.
func (g *agentGen) anthropic() map[string]any {
	var msgs []any
	if g.pick(4) == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": "Leading " + g.text()})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "Fix the failing test. " + g.text()})
	for turn := range 1 + g.pick(3) {
		var blocks []any
		if g.pick(3) == 0 {
			blocks = append(blocks, map[string]any{"type": "thinking", "thinking": g.text(), "signature": "sig"})
		}
		if g.pick(5) == 0 {
			blocks = append(blocks, map[string]any{"type": "redacted_thinking", "data": "xx"})
		}
		if g.pick(2) == 0 {
			blocks = append(blocks, map[string]any{"type": "text", "text": g.text()})
		}
		calls := 1 + g.pick(2)
		for c := range calls {
			in := any(g.args())
			if g.pick(6) == 0 {
				in = nil
			}
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d_%d", turn, c), "name": "read_file", "input": in})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": blocks})
		var results []any
		for c := range calls {
			var content any = g.text()
			switch g.pick(3) {
			case 0:
				content = []any{map[string]any{"type": "text", "text": g.text()}, map[string]any{"type": "text", "text": "line 2"}}
			case 1:
				content = nil
			}
			results = append(results, map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprintf("toolu_%d_%d", turn, c), "content": content, "is_error": g.pick(4) == 0})
		}
		if g.pick(2) == 0 {
			results = append(results, map[string]any{"type": "text", "text": "Go on. " + g.text()})
		}
		if g.pick(4) == 0 {
			results = append([]any{map[string]any{"type": "text", "text": ""}}, results...)
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": results})
	}
	body := map[string]any{"model": "m", "max_tokens": 4096, "messages": msgs}
	if s := g.anthropicSystem(); s != nil {
		body["system"] = s
	}
	if g.pick(3) > 0 {
		tool := map[string]any{"name": "read_file", "input_schema": g.schema()}
		if g.pick(2) == 0 {
			tool["description"] = "Read a file. " + g.text()
		}
		if g.pick(3) == 0 {
			tool["strict"] = true
		}
		body["tools"] = []any{tool}
		body["tool_choice"] = []any{map[string]any{"type": "auto"}, map[string]any{"type": "any"}, map[string]any{"type": "tool", "name": "read_file"}}[g.pick(3)]
	}
	switch g.pick(4) {
	case 0:
		body["thinking"] = map[string]any{"type": "disabled"}
	case 1:
		body["thinking"] = map[string]any{"type": "enabled", "budget_tokens": 2048}
	case 2:
		body["output_config"] = map[string]any{"effort": "high"}
	}
	if g.pick(4) == 0 {
		body["chat_template_kwargs"] = map[string]any{"enable_thinking": g.pick(2) == 0}
	}
	return body
}

// responses is one Responses body: instructions, then items of messages,
// reasoning, function calls and their outputs.
func (g *agentGen) responses() map[string]any {
	body := map[string]any{"model": "m"}
	if g.pick(4) > 0 {
		body["instructions"] = "You are a coding agent. " + g.text()
	}
	if g.pick(6) == 0 {
		body["input"] = "Fix the failing test. " + g.text()
		return body
	}
	user := map[string]any{"role": "user", "content": "Fix the failing test. " + g.text()}
	if g.pick(2) == 0 {
		user = map[string]any{"type": "message", "role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "Fix the failing test."}, map[string]any{"type": "input_text", "text": g.text()},
		}}
	}
	items := []any{user}
	for turn := range 1 + g.pick(3) {
		var said []any // reasoning, an assistant message: either order
		if g.pick(2) == 0 {
			field := []string{"content", "summary"}[g.pick(2)]
			said = append(said, map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}, field: []any{map[string]any{"type": "reasoning_text", "text": "Thinking: " + g.text()}}})
		}
		if g.pick(2) == 0 {
			said = append(said, map[string]any{"type": "message", "role": "assistant", "status": "completed", "content": []any{map[string]any{"type": "output_text", "text": g.text(), "annotations": []any{}}}})
		}
		if len(said) == 2 && g.pick(2) == 0 {
			said[0], said[1] = said[1], said[0]
		}
		items = append(items, said...)
		calls := 1 + g.pick(2)
		for c := range calls {
			args, _ := json.Marshal(g.args())
			items = append(items, map[string]any{"type": "function_call", "call_id": fmt.Sprintf("call_%d_%d", turn, c), "name": "read_file", "arguments": string(args)})
		}
		for c := range calls {
			items = append(items, map[string]any{"type": "function_call_output", "call_id": fmt.Sprintf("call_%d_%d", turn, c), "output": g.text()})
		}
	}
	switch g.pick(4) {
	case 0:
		items = append(items, map[string]any{"role": "user", "content": "Go on. " + g.text()})
	case 1:
		items = append(items, map[string]any{"type": "message", "role": "assistant", "status": "in_progress", "content": []any{map[string]any{"type": "output_text", "text": "The fix is"}}})
	}
	body["input"] = items
	if g.pick(3) > 0 {
		tool := map[string]any{"type": "function", "name": "read_file", "parameters": g.schema()}
		if g.pick(2) == 0 {
			tool["description"] = "Read a file. " + g.text()
		}
		if g.pick(2) == 0 {
			tool["strict"] = g.pick(2) == 0
		}
		body["tools"] = []any{tool, map[string]any{"type": "web_search"}}
	}
	if g.pick(3) == 0 {
		body["reasoning"] = map[string]any{"effort": []string{"low", "high", "none"}[g.pick(3)]}
	}
	if g.pick(5) == 0 {
		body["chat_template_kwargs"] = map[string]any{"enable_thinking": false}
	}
	return body
}

// agentRequestOf converts a Messages or Responses body as the router does.
func agentRequestOf(t *testing.T, api string, body []byte) *Request {
	t.Helper()
	lx := jsonlex.New(body, jsonlex.Options{})
	var a AnthropicFields
	var r ResponsesFields
	err := lx.Object(func(key []byte) error {
		var ok bool
		var err error
		if api == "anthropic" {
			ok, err = a.Decode(key, lx)
		} else {
			ok, err = r.Decode(key, lx)
		}
		if ok {
			return err
		}
		return lx.Skip()
	})
	if err != nil {
		t.Fatal(err)
	}
	var req *Request
	if api == "anthropic" {
		req, err = a.Request(4096)
	} else {
		req, err = r.Request()
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", api, err, body)
	}
	return req
}

// TestAgentAPIsAgainstJinja2 converts generated agent conversations in both
// APIs and renders them with every real template, in Go and with jinja2
// after the oracle's own conversion written from vLLM's source
// (tokenizer/jinja/testdata/agent_apis.py): the prompts must be
// byte-identical, or both sides fail.
func TestAgentAPIsAgainstJinja2(t *testing.T) {
	pyoracle.Get(t)
	const n = 30
	g := &agentGen{rng: rand.New(rand.NewSource(7))}
	var bodies []oracleBody
	for i := range 2 * n {
		api, b := "anthropic", g.anthropic()
		if i%2 == 1 {
			api, b = "responses", g.responses()
		}
		j, _ := json.Marshal(b)
		bodies = append(bodies, oracleBody{api, j})
	}
	same, bad, total := templatesAgainstJinja2(t, bodies, func(b oracleBody) *Request { return agentRequestOf(t, b.key, b.json) })
	if same < total/2 {
		t.Errorf("only %d of %d renders succeeded on both sides", same, total)
	}
	t.Logf("%d of %d renders byte-identical, %d differ, the rest fail on both sides", same, total, bad)
}

// TestChatBodyRendersAlike: the chat body of a converted request renders
// the prompt the converted request does (its tool call arguments as JSON
// strings, parsed back as vLLM parses them).
func TestChatBodyRendersAlike(t *testing.T) {
	c, _ := loadTemplateChat(t, chatTemplates[0])
	g := &agentGen{rng: rand.New(rand.NewSource(11))}
	rendered := 0
	for i := range 20 {
		api, b := "anthropic", g.anthropic()
		if i%2 == 1 {
			api, b = "responses", g.responses()
		}
		j, _ := json.Marshal(b)
		req := agentRequestOf(t, api, j)
		body, err := req.ChatBody("m")
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseRequest(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		want, werr := c.Render(req)
		got, gerr := c.Render(again)
		if got != want || (werr == nil) != (gerr == nil) {
			t.Fatalf("%s body %s renders %q (%v), the request %q (%v)", api, body, got, gerr, want, werr)
		}
		if werr == nil {
			rendered++
		}
	}
	if rendered < 15 {
		t.Errorf("%d of 20 rendered", rendered)
	}
}
