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
// first jinja.ErrLimit as Fields.Decode does.
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
	if d, ok := client.(*jinja.Dict); ok && d == nil { // a typed nil: none
		client = nil
	}
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
