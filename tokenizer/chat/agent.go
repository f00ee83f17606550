package chat

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// Anthropic Messages (POST /v1/messages) and OpenAI Responses (POST
// /v1/responses) bodies reach the chat template as vLLM converts them into
// a chat completions request: AnthropicFields and ResponsesFields gather
// their members in the router's one walk of the body and build the same
// Request a chat completions body gives.

// FieldError is a body vLLM refuses with a 400 (its request schema's
// validation): the member at fault and why.
type FieldError struct {
	Param, Message string
}

func (e *FieldError) Error() string { return e.Param + ": " + e.Message }

func fieldErr(param, format string, args ...any) *FieldError {
	return &FieldError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// ErrNotExact is a body vLLM accepts but whose prompt depends on what
// kvrouter cannot see (a server's probe of its template, a Python repr):
// the router routes it by load.
var ErrNotExact = errors.New("tokenizer: chat: the prompt vLLM renders for this body is not known exactly")

// decodeMember reads the value lx is at into dst, noting in limit the
// first error wrapping jinja.ErrLimit: the value is whole but for those
// parts, and the request cannot be rendered.
func decodeMember(dst *jinja.Value, lx *jsonlex.Lexer, limit *error) error {
	v, err := jinja.DecodeJSON(lx)
	if err != nil && errors.Is(err, jinja.ErrLimit) {
		if *limit == nil {
			*limit = err
		}
		err = nil
	}
	*dst = v
	return err
}

// dict builds a *jinja.Dict from key, value pairs in order.
func dict(kv ...jinja.Value) *jinja.Dict {
	d := jinja.NewDict()
	for i := 0; i+1 < len(kv); i += 2 {
		d.SetString(kv[i].(string), kv[i+1])
	}
	return d
}

// optString is a member that must be a string or absent (null).
func optString(v jinja.Value, param string) (string, error) {
	switch s := v.(type) {
	case nil:
		return "", nil
	case string:
		return s, nil
	}
	return "", fieldErr(param, "%s must be a string", param)
}

// optDict is a member that must be an object or absent (null).
func optDict(v jinja.Value, param string) (*jinja.Dict, error) {
	switch d := v.(type) {
	case nil:
		return nil, nil
	case *jinja.Dict:
		return d, nil
	}
	return nil, fieldErr(param, "%s must be an object", param)
}

// optList is a member that must be a list or absent (null).
func optList(v jinja.Value, param string) (*jinja.List, error) {
	switch l := v.(type) {
	case nil:
		return nil, nil
	case *jinja.List:
		return l, nil
	}
	return nil, fieldErr(param, "%s must be a list", param)
}

// oneOf checks that v is one of the strings allowed.
func oneOf(v jinja.Value, param string, allowed ...string) (string, error) {
	s, ok := v.(string)
	if ok {
		for _, a := range allowed {
			if s == a {
				return s, nil
			}
		}
	}
	return "", fieldErr(param, "%s must be one of %q", param, allowed)
}

// templateKwargs are the chat_template_kwargs vLLM renders with: the
// client's (checked to be an object), with its own settings merged over
// them (vLLM's merge_kwargs: a None value is not set).
func templateKwargs(client jinja.Value, set ...jinja.Value) (*jinja.Dict, error) {
	base, err := optDict(client, "chat_template_kwargs")
	if err != nil {
		return nil, err
	}
	out := jinja.NewDict()
	if base != nil {
		for i, k := range base.Keys() {
			_ = out.Set(k, base.Values()[i])
		}
	}
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] != nil {
			out.SetString(set[i].(string), set[i+1])
		}
	}
	return out, nil
}

// agentRequest is the Request of a converted body: its kwargs carry
// add_generation_prompt and continue_final_message, as vLLM passes them.
func agentRequest(msgs []jinja.Value, tools *jinja.List, kwargs *jinja.Dict) *Request {
	gen, _ := get(kwargs, "add_generation_prompt").(bool)
	cont, _ := get(kwargs, "continue_final_message").(bool)
	return &Request{
		Messages: msgs, Tools: tools, Kwargs: kwargs,
		AddGenerationPrompt: gen, ContinueFinalMessage: cont,
		hasMedia: hasMediaPart(msgs),
	}
}

// ChatBody is the chat completions body of a converted request: its
// messages, tools, chat_template_kwargs and generation flags, for a
// render endpoint that serves /v1/chat/completions/render but not the
// agent APIs' render paths.
func (req *Request) ChatBody(model string) ([]byte, error) {
	msgs := make([]jinja.Value, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = m
		d, ok := m.(*jinja.Dict)
		calls, _ := get(d, "tool_calls").(*jinja.List)
		if !ok || calls == nil {
			continue
		}
		// A chat request's tool call arguments are a JSON string (vLLM
		// parses it back before rendering).
		out := make([]jinja.Value, len(calls.Items))
		for j, c := range calls.Items {
			cd, _ := c.(*jinja.Dict)
			fn, _ := get(cd, "function").(*jinja.Dict)
			args, isDict := get(fn, "arguments").(*jinja.Dict)
			if !isDict {
				out[j] = c
				continue
			}
			text, err := jinja.ToJSON(args)
			if err != nil {
				return nil, fmt.Errorf("tokenizer: chat: %w", err)
			}
			fn2, c2 := jinja.NewDict(), jinja.NewDict()
			copyMissing(cd, c2)
			c2.SetString("function", fn2)
			fn2.SetString("arguments", text)
			copyMissing(fn, fn2)
			out[j] = c2
		}
		m2 := jinja.NewDict()
		copyMissing(d, m2)
		m2.SetString("tool_calls", jinja.NewList(out...))
		msgs[i] = m2
	}
	d := dict("model", model, "messages", jinja.NewList(msgs...),
		"add_generation_prompt", req.AddGenerationPrompt, "continue_final_message", req.ContinueFinalMessage)
	if req.Tools != nil {
		d.SetString("tools", req.Tools)
	}
	if req.Kwargs != nil {
		d.SetString("chat_template_kwargs", req.Kwargs)
	}
	s, err := jinja.ToJSON(d)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat: %w", err)
	}
	return []byte(s), nil
}
