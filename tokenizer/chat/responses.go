package chat

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// ResponsesFields are the members of an OpenAI Responses request body that
// vLLM's prompt depends on, each as read (nil when absent or null).
//
// The conversion is vLLM's construct_input_messages and
// should_continue_final_message (vllm/entrypoints/openai/responses/utils.py
// at vLLM commit 01ca842d) with its tools from construct_tool_dicts there:
// the instructions as the system message, then the input items, a
// function call, a reasoning item or an assistant message joining the
// assistant message before it when that lacks its part.
type ResponsesFields struct {
	Input, Instructions, Tools, Reasoning, Kwargs jinja.Value
	// Limit is as in Fields.
	Limit error
}

// Decode reads the member key when the prompt depends on it, and reports
// whether it did (Fields.Decode).
func (f *ResponsesFields) Decode(key []byte, lx *jsonlex.Lexer) (bool, error) {
	var dst *jinja.Value
	switch string(key) {
	case "input":
		dst = &f.Input
	case "instructions":
		dst = &f.Instructions
	case "tools":
		dst = &f.Tools
	case "reasoning":
		dst = &f.Reasoning
	case "chat_template_kwargs":
		dst = &f.Kwargs
	default:
		return false, nil
	}
	return true, decodeMember(dst, lx, &f.Limit)
}

// Request checks the members as vLLM's schema does (a *FieldError) and
// returns the chat template's input, for a request without a
// previous_response_id (whose stored conversation only its pod knows); an
// error wrapping ErrNotExact when vLLM's prompt is not known exactly.
func (f *ResponsesFields) Request() (*Request, error) {
	instructions, err := optString(f.Instructions, "instructions")
	if err != nil {
		return nil, err
	}
	var effort jinja.Value
	if r, err := optDict(f.Reasoning, "reasoning"); err != nil {
		return nil, err
	} else if e := get(r, "effort"); e != nil {
		if effort, err = oneOf(e, "reasoning.effort", "none", "minimal", "low", "medium", "high", "xhigh"); err != nil {
			return nil, err
		}
	}
	tools, err := responsesTools(f.Tools)
	if err != nil {
		return nil, err
	}
	var msgs []jinja.Value
	if instructions != "" {
		msgs = append(msgs, dict("role", "system", "content", instructions))
	}
	cont := false
	switch in := f.Input.(type) {
	case string:
		msgs = append(msgs, dict("role", "user", "content", in))
	case *jinja.List:
		for i, it := range in.Items {
			if msgs, err = responseItem(it, msgs, fmt.Sprintf("input[%d]", i)); err != nil {
				return nil, err
			}
		}
		cont = continuesFinal(in)
	default:
		return nil, fieldErr("input", "input must be a string or a list of items")
	}
	kwargs, err := templateKwargs(f.Kwargs, "add_generation_prompt", !cont, "continue_final_message", cont,
		"reasoning_effort", effort)
	if err != nil {
		return nil, err
	}
	return agentRequest(msgs, tools, kwargs), nil
}

// continuesFinal is vLLM's should_continue_final_message: the last item is
// a message or a reasoning item still in progress or incomplete.
func continuesFinal(in *jinja.List) bool {
	if len(in.Items) == 0 {
		return false
	}
	last, ok := in.Items[len(in.Items)-1].(*jinja.Dict)
	if !ok {
		return false
	}
	typ, ok := get(last, "type").(string)
	if !ok {
		typ = "message"
	}
	status := get(last, "status")
	return (typ == "message" || typ == "reasoning") && (status == "in_progress" || status == "incomplete")
}

// responseItem appends the chat message of one input item to msgs, or
// merges it into the assistant message msgs ends with.
func responseItem(it jinja.Value, msgs []jinja.Value, param string) ([]jinja.Value, error) {
	d, ok := it.(*jinja.Dict)
	if !ok {
		return nil, fieldErr(param, "%s must be an object", param)
	}
	var prev *jinja.Dict // the assistant message before, when it is one
	if n := len(msgs); n > 0 && get(msgs[n-1].(*jinja.Dict), "role") == "assistant" {
		prev = msgs[n-1].(*jinja.Dict)
	}
	typ, _ := get(d, "type").(string)
	switch {
	case typ == "function_call":
		var s [3]string
		for i, k := range []string{"call_id", "name", "arguments"} {
			var ok bool
			if s[i], ok = get(d, k).(string); !ok {
				return nil, fieldErr(param+"."+k, "%s.%s must be a string", param, k)
			}
		}
		if get(d, "namespace") != nil {
			return nil, fmt.Errorf("%w: a function call in a namespace", ErrNotExact)
		}
		call := dict("id", s[0], "function", dict("name", s[1], "arguments", s[2]), "type", "function")
		if prev != nil {
			switch calls := get(prev, "tool_calls").(type) {
			case nil:
				prev.SetString("tool_calls", jinja.NewList(call))
				return msgs, nil
			case *jinja.List:
				calls.Items = append(calls.Items, call)
				return msgs, nil
			}
		}
		return append(msgs, dict("role", "assistant", "tool_calls", jinja.NewList(call))), nil
	case typ == "function_call_output":
		if _, ok := get(d, "call_id").(string); !ok {
			return nil, fieldErr(param+".call_id", "%s.call_id must be a string", param)
		}
		return append(msgs, dict("role", "tool", "content", get(d, "output"), "tool_call_id", get(d, "call_id"))), nil
	case typ == "reasoning":
		if get(d, "encrypted_content") != nil {
			return nil, fmt.Errorf("%w: encrypted reasoning", ErrNotExact)
		}
		text := firstText(get(d, "content"))
		if text == nil {
			text = firstText(get(d, "summary"))
		}
		if text == nil {
			text = ""
		}
		if prev != nil {
			if get(prev, "reasoning") == nil {
				prev.SetString("reasoning", text)
				return msgs, nil
			}
		}
		return append(msgs, dict("role", "assistant", "reasoning", text)), nil
	case get(d, "role") == "assistant":
		var text jinja.Value = ""
		switch c := get(d, "content").(type) {
		case string:
			text = c
		case *jinja.List:
			if t := firstText(c); t != nil {
				text = t
			}
		}
		if prev != nil && get(prev, "content") == nil {
			prev.SetString("content", text)
			return msgs, nil
		}
		return append(msgs, dict("role", "assistant", "content", text)), nil
	case typ == "" || typ == "message":
		if _, err := oneOf(get(d, "role"), param+".role", "user", "system", "developer", "assistant"); err != nil {
			return nil, err
		}
		return append(msgs, d), nil // as sent: the chat conversion reads it
	}
	return nil, fmt.Errorf("%w: an input item of type %q", ErrNotExact, typ)
}

// firstText is the text of a list's first element (its "text" when an
// object, "" without one); nil for an empty or absent list.
func firstText(v jinja.Value) jinja.Value {
	l, ok := v.(*jinja.List)
	if !ok || len(l.Items) == 0 {
		return nil
	}
	switch x := l.Items[0].(type) {
	case *jinja.Dict:
		if t, ok := x.Get("text"); ok {
			return t
		}
		return ""
	default:
		return x
	}
}

// responsesTools are the function tools of a Responses request as vLLM
// hands them to the template: each flat {"type": "function", "name", ...}
// as a chat completions tool; other tool types are not rendered.
func responsesTools(v jinja.Value) (*jinja.List, error) {
	l, err := optList(v, "tools")
	if err != nil || l == nil || len(l.Items) == 0 {
		return nil, err
	}
	out := []jinja.Value{}
	for i, t := range l.Items {
		param := fmt.Sprintf("tools[%d]", i)
		d, ok := t.(*jinja.Dict)
		if !ok {
			return nil, fieldErr(param, "%s must be an object", param)
		}
		switch get(d, "type") {
		case "function":
		case "namespace":
			return nil, fmt.Errorf("%w: a namespace of tools", ErrNotExact)
		default:
			continue
		}
		if _, ok := get(d, "name").(string); !ok {
			return nil, fieldErr(param+".name", "%s.name must be a string", param)
		}
		fn := jinja.NewDict()
		for i, k := range d.Keys() {
			if k != "type" {
				_ = fn.Set(k, d.Values()[i])
			}
		}
		out = append(out, dict("type", "function", "function", fn))
	}
	return jinja.NewList(out...), nil // [] when none is a function, as vLLM's
}
