package chat

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// AnthropicFields are the members of an Anthropic Messages request body
// that vLLM's prompt depends on, each as read (nil when absent or null).
//
// The conversion is vLLM's AnthropicServingMessages.to_chat_completion_request
// (vllm/entrypoints/anthropic/serving.py and inline_system.py at vLLM commit
// a8c3bdb2, the request schema in protocol.py there): the system prompt
// first, each message's blocks as chat content parts, tool calls and
// results, thinking as reasoning, tools as functions.
type AnthropicFields struct {
	System, Messages, Tools, ToolChoice, Thinking, OutputConfig, Kwargs jinja.Value
	// Limit is as in Fields.
	Limit error
}

// Decode reads the member key when the prompt depends on it, and reports
// whether it did (Fields.Decode).
func (f *AnthropicFields) Decode(key []byte, lx *jsonlex.Lexer) (bool, error) {
	var dst *jinja.Value
	switch string(key) {
	case "system":
		dst = &f.System
	case "messages":
		dst = &f.Messages
	case "tools":
		dst = &f.Tools
	case "tool_choice":
		dst = &f.ToolChoice
	case "thinking":
		dst = &f.Thinking
	case "output_config":
		dst = &f.OutputConfig
	case "chat_template_kwargs":
		dst = &f.Kwargs
	default:
		return false, nil
	}
	return true, decodeMember(dst, lx, &f.Limit)
}

// billingHeader starts the text of system blocks vLLM drops.
const billingHeader = "x-anthropic-billing-header"

// Request checks the members as vLLM's schema does (a *FieldError) and
// returns the chat template's input; an error wrapping ErrNotExact when
// vLLM's prompt is not known exactly. maxTokens is the request's
// max_tokens, which a thinking budget must stay below.
func (f *AnthropicFields) Request(maxTokens int64) (*Request, error) {
	effort, err := f.effort(maxTokens)
	if err != nil {
		return nil, err
	}
	tools, err := anthropicTools(f.Tools)
	if err != nil {
		return nil, err
	}
	if err := anthropicToolChoice(f.ToolChoice); err != nil {
		return nil, err
	}
	msgs, err := optList(f.Messages, "messages")
	if err != nil || msgs == nil {
		return nil, fieldErr("messages", "messages must be a list of messages")
	}
	for i, m := range msgs.Items {
		if err := checkAnthropicMessage(m, fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
	}
	var system string
	switch s := f.System.(type) {
	case nil:
	case string:
		system = s
	case *jinja.List:
		if err := checkBlocks(s, "system"); err != nil {
			return nil, err
		}
		system = blocksText(s)
	default:
		return nil, fieldErr("system", "system must be a string or a list of content blocks")
	}
	// Leading system messages join the system prompt; vLLM renders a later
	// one as its probe of the template decides (preserve or fold).
	rest := msgs.Items
	var leading []string
	for len(rest) > 0 && get(rest[0].(*jinja.Dict), "role") == "system" {
		if t := anthropicSystemText(rest[0].(*jinja.Dict)); t != "" {
			leading = append(leading, t)
		}
		rest = rest[1:]
	}
	out := make([]jinja.Value, 0, len(rest)+1)
	if s := joinNonEmpty("\n\n", system, strings.Join(leading, "\n\n")); s != "" {
		out = append(out, dict("role", "system", "content", s))
	}
	for _, m := range rest {
		if out, err = convertAnthropic(m.(*jinja.Dict), out); err != nil {
			return nil, err
		}
	}
	kwargs, err := templateKwargs(f.Kwargs, "add_generation_prompt", true, "continue_final_message", false,
		"reasoning_effort", effort, "enable_thinking", enableThinking(f.Kwargs, effort))
	if err != nil {
		return nil, err
	}
	return agentRequest(out, tools, kwargs), nil
}

// effort is the reasoning_effort vLLM passes for output_config.effort and
// thinking (disabled: "none"; nil when neither sets one).
func (f *AnthropicFields) effort(maxTokens int64) (jinja.Value, error) {
	var effort jinja.Value
	oc, err := optDict(f.OutputConfig, "output_config")
	if err != nil {
		return nil, err
	}
	if e := get(oc, "effort"); e != nil {
		if effort, err = oneOf(e, "output_config.effort", "low", "medium", "high", "xhigh", "max"); err != nil {
			return nil, err
		}
	}
	th, err := optDict(f.Thinking, "thinking")
	if err != nil || th == nil {
		return effort, err
	}
	kind, err := oneOf(get(th, "type"), "thinking.type", "enabled", "disabled", "adaptive")
	if err != nil {
		return nil, err
	}
	switch kind {
	case "disabled":
		effort = "none"
	case "enabled":
		b, ok := get(th, "budget_tokens").(int64)
		if !ok || b < 1024 {
			return nil, fieldErr("thinking.budget_tokens", "thinking.budget_tokens must be an integer of at least 1024")
		}
		if b >= maxTokens {
			return nil, fieldErr("thinking.budget_tokens", "thinking.budget_tokens must be less than max_tokens")
		}
	}
	return effort, nil
}

// enableThinking is vLLM's enable_thinking for a reasoning effort: unless
// the client's kwargs set it, effort != "none" (nil without an effort).
func enableThinking(client, effort jinja.Value) jinja.Value {
	if effort == nil {
		return nil
	}
	if d, ok := client.(*jinja.Dict); ok {
		if _, set := d.Get("enable_thinking"); set {
			return nil
		}
	}
	return effort != "none"
}

func anthropicTools(v jinja.Value) (*jinja.List, error) {
	l, err := optList(v, "tools")
	if err != nil || l == nil {
		return nil, err
	}
	out := make([]jinja.Value, len(l.Items))
	for i, t := range l.Items {
		param := fmt.Sprintf("tools[%d]", i)
		d, ok := t.(*jinja.Dict)
		if !ok {
			return nil, fieldErr(param, "%s must be an object", param)
		}
		name, ok := get(d, "name").(string)
		if !ok {
			return nil, fieldErr(param+".name", "%s.name must be a string", param)
		}
		desc, err := optString(get(d, "description"), param+".description")
		if err != nil {
			return nil, err
		}
		schema, ok := get(d, "input_schema").(*jinja.Dict)
		if !ok {
			return nil, fieldErr(param+".input_schema", "%s.input_schema must be an object", param)
		}
		if _, ok := schema.Get("type"); !ok { // vLLM's validator adds it, in place
			schema.SetString("type", "object")
		}
		fn := dict("name", name, "description", nilIfAbsent(d, "description", desc), "parameters", schema)
		for _, k := range []string{"strict", "defer_loading"} {
			switch b := get(d, k).(type) {
			case nil:
			case bool:
				fn.SetString(k, b)
			default:
				return nil, fieldErr(param+"."+k, "%s.%s must be a boolean", param, k)
			}
		}
		out[i] = dict("type", "function", "function", fn)
	}
	return jinja.NewList(out...), nil
}

// nilIfAbsent is s, or nil when d has no (or a null) key.
func nilIfAbsent(d *jinja.Dict, key, s string) jinja.Value {
	if get(d, key) == nil {
		return nil
	}
	return s
}

func anthropicToolChoice(v jinja.Value) error {
	d, err := optDict(v, "tool_choice")
	if err != nil || d == nil {
		return err
	}
	kind, err := oneOf(get(d, "type"), "tool_choice.type", "auto", "any", "tool", "none")
	if err != nil {
		return err
	}
	if name, _ := get(d, "name").(string); kind == "tool" && name == "" {
		return fieldErr("tool_choice.name", "tool_choice.name is required when type is 'tool'")
	}
	return nil
}

// checkAnthropicMessage checks a message against vLLM's AnthropicMessage.
func checkAnthropicMessage(m jinja.Value, param string) error {
	d, ok := m.(*jinja.Dict)
	if !ok {
		return fieldErr(param, "%s must be an object", param)
	}
	if _, err := oneOf(get(d, "role"), param+".role", "user", "assistant", "system"); err != nil {
		return err
	}
	switch c := get(d, "content").(type) {
	case string:
		return nil
	case *jinja.List:
		return checkBlocks(c, param+".content")
	}
	return fieldErr(param+".content", "%s.content must be a string or a list of content blocks", param)
}

// checkBlocks checks content blocks against vLLM's AnthropicContentBlock.
func checkBlocks(l *jinja.List, param string) error {
	for i, b := range l.Items {
		p := fmt.Sprintf("%s[%d]", param, i)
		d, ok := b.(*jinja.Dict)
		if !ok {
			return fieldErr(p, "%s must be an object", p)
		}
		if _, err := oneOf(get(d, "type"), p+".type", "text", "image", "tool_use", "tool_result",
			"tool_reference", "thinking", "redacted_thinking"); err != nil {
			return err
		}
		for _, k := range []string{"text", "id", "tool_use_id", "name", "tool_name", "thinking", "signature", "data"} {
			if _, err := optString(get(d, k), p+"."+k); err != nil {
				return err
			}
		}
		for _, k := range []string{"source", "input"} {
			if _, err := optDict(get(d, k), p+"."+k); err != nil {
				return err
			}
		}
		switch c := get(d, "content").(type) {
		case nil, string:
		case *jinja.List:
			for _, it := range c.Items {
				if _, ok := it.(*jinja.Dict); !ok {
					return fieldErr(p+".content", "%s.content must be a string or a list of objects", p)
				}
			}
		default:
			return fieldErr(p+".content", "%s.content must be a string or a list of objects", p)
		}
		if e := get(d, "is_error"); e != nil {
			if _, ok := e.(bool); !ok {
				return fieldErr(p+".is_error", "%s.is_error must be a boolean", p)
			}
		}
	}
	return nil
}

// blocksText is vLLM's text of system blocks: the non-empty text blocks
// but billing headers, joined with nothing between them.
func blocksText(l *jinja.List) string {
	var b strings.Builder
	for _, it := range l.Items {
		d := it.(*jinja.Dict)
		if t, _ := get(d, "text").(string); get(d, "type") == "text" && t != "" && !strings.HasPrefix(t, billingHeader) {
			b.WriteString(t)
		}
	}
	return b.String()
}

// anthropicSystemText is the text of a system message (a billing header: none).
func anthropicSystemText(d *jinja.Dict) string {
	switch c := get(d, "content").(type) {
	case string:
		if strings.HasPrefix(c, billingHeader) {
			return ""
		}
		return c
	case *jinja.List:
		return blocksText(c)
	}
	return ""
}

func joinNonEmpty(sep string, texts ...string) string {
	var kept []string
	for _, t := range texts {
		if t != "" {
			kept = append(kept, t)
		}
	}
	return strings.Join(kept, sep)
}

// convertAnthropic appends the chat messages of one Anthropic message to
// out: a user message's tool results first, as tool messages (with a user
// message of a result's images after it), then the message of its other
// blocks; an assistant's text, reasoning and tool calls as one message.
func convertAnthropic(m *jinja.Dict, out []jinja.Value) ([]jinja.Value, error) {
	role := get(m, "role").(string)
	if role == "system" { // not leading: rendered as vLLM's template probe decides
		return nil, fmt.Errorf("%w: a system message after the first turn", ErrNotExact)
	}
	msg := dict("role", role)
	blocks, ok := get(m, "content").(*jinja.List)
	if !ok {
		msg.SetString("content", get(m, "content"))
		return append(out, msg), nil
	}
	var parts, calls []jinja.Value
	var reasoning []string
	for _, b := range blocks.Items {
		d := b.(*jinja.Dict)
		switch get(d, "type") {
		case "text":
			if t, _ := get(d, "text").(string); t != "" {
				parts = append(parts, dict("type", "text", "text", t))
			}
		case "image":
			if src, _ := get(d, "source").(*jinja.Dict); src != nil {
				parts = append(parts, dict("type", "image_url", "image_url", dict("url", imageURL(src))))
			}
		case "thinking":
			if t, ok := get(d, "thinking").(string); ok {
				reasoning = append(reasoning, t)
			}
		case "tool_use":
			calls = append(calls, toolUse(d))
		case "tool_result":
			if role != "user" {
				text, _ := get(d, "content").(string)
				if l, ok := get(d, "content").(*jinja.List); ok && len(l.Items) > 0 { // vLLM renders str() of it: a Python repr
					return nil, fmt.Errorf("%w: an assistant tool_result with a list content", ErrNotExact)
				}
				parts = append(parts, dict("type", "text", "text", "Tool result: "+text))
				continue
			}
			var err error
			if out, err = toolResult(d, out); err != nil {
				return nil, err
			}
		}
	}
	if len(reasoning) > 0 {
		msg.SetString("reasoning", strings.Join(reasoning, ""))
	}
	if len(calls) > 0 {
		msg.SetString("tool_calls", jinja.NewList(calls...))
	}
	switch {
	case len(parts) == 1 && get(parts[0].(*jinja.Dict), "type") == "text":
		msg.SetString("content", get(parts[0].(*jinja.Dict), "text"))
	case len(parts) > 0:
		msg.SetString("content", jinja.NewList(parts...))
	case len(calls) == 0 && len(reasoning) == 0 && role == "user":
		return out, nil // vLLM drops a user message left without content
	}
	return append(out, msg), nil
}

// imageURL is the URL vLLM gives an image block's source.
func imageURL(src *jinja.Dict) string {
	if get(src, "type") == "url" {
		u, _ := get(src, "url").(string)
		return u
	}
	media, ok := get(src, "media_type").(string)
	if !ok {
		media = "image/jpeg"
	}
	data, _ := get(src, "data").(string)
	return "data:" + media + ";base64," + data
}

// toolUse is a tool_use block as a chat tool call. vLLM passes its input
// as json.dumps and parses it back before rendering: the template sees
// the object.
func toolUse(d *jinja.Dict) *jinja.Dict {
	id, _ := get(d, "id").(string)
	if id == "" {
		id = fmt.Sprintf("call_%d", time.Now().Unix())
	}
	name, _ := get(d, "name").(string)
	args, _ := get(d, "input").(*jinja.Dict)
	if args == nil {
		args = jinja.NewDict()
	}
	return dict("id", id, "type", "function", "function", dict("name", name, "arguments", args))
}

// toolResult appends a user's tool_result block as vLLM does: a tool
// message of its text items joined by "\n", then a user message of its
// images when it has any.
func toolResult(d *jinja.Dict, out []jinja.Value) ([]jinja.Value, error) {
	id, _ := get(d, "tool_use_id").(string)
	var text string
	var images []jinja.Value
	switch c := get(d, "content").(type) {
	case string:
		text = c
	case *jinja.List:
		var texts []string
		for _, it := range c.Items {
			item := it.(*jinja.Dict)
			switch get(item, "type") {
			case "text":
				t, _ := get(item, "text").(string)
				texts = append(texts, t)
			case "image":
				if src, _ := get(item, "source").(*jinja.Dict); src != nil {
					images = append(images, dict("type", "image_url", "image_url", dict("url", imageURL(src))))
				}
			case "tool_reference":
				return nil, fmt.Errorf("%w: a tool_reference in a tool_result", ErrNotExact)
			}
		}
		text = strings.Join(texts, "\n")
	}
	out = append(out, dict("role", "tool", "tool_call_id", id, "content", text))
	if len(images) > 0 {
		out = append(out, dict("role", "user", "content", jinja.NewList(images...)))
	}
	return out, nil
}
