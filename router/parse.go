package router

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// Kind is the OpenAI endpoint a request is for.
type Kind uint8

// The endpoints the router understands. Anything else is routed by load.
const (
	KindOther Kind = iota
	KindCompletion
	KindChat
	KindMessages  // Anthropic Messages: POST /v1/messages
	KindResponses // OpenAI Responses: POST /v1/responses
)

func (k Kind) String() string {
	switch k {
	case KindCompletion:
		return "completion"
	case KindChat:
		return "chat"
	case KindMessages:
		return "messages"
	case KindResponses:
		return "responses"
	default:
		return "other"
	}
}

// KindOf maps a request path (query string ignored) to its kind.
func KindOf(path string) Kind {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	switch strings.TrimSuffix(path, "/") {
	case "/v1/completions":
		return KindCompletion
	case "/v1/chat/completions":
		return KindChat
	case "/v1/messages":
		return KindMessages
	case "/v1/responses":
		return KindResponses
	default:
		return KindOther
	}
}

// Parsed is what the router reads from an OpenAI request body.
type Parsed struct {
	Kind      Kind
	Model     string
	CacheSalt string
	Stream    bool
	// Completion: the prompt as text, or as token ids (used verbatim).
	Prompt       string
	PromptTokens []uint32
	// Chat: the chat template's input, read in the same pass over the body
	// as everything else (Messages and Responses: converted as vLLM
	// converts them into a chat request).
	Chat *chat.Request
	// PreviousResponseID is a Responses request's previous_response_id:
	// the response whose stored conversation the prompt continues.
	PreviousResponseID string
	// chatErr is why Chat cannot be rendered: a value beyond the template
	// engine's limits, which vLLM may still take. AppendTokens returns it,
	// so the request is routed by load.
	chatErr error
	// Body is the request body as received.
	Body []byte
}

// RenderErr is why p.Chat cannot be rendered as vLLM renders it (nil when
// it can): a value beyond the template engine's limits, or a body whose
// prompt depends on what kvrouter cannot see (chat.ErrNotExact).
func (p *Parsed) RenderErr() error { return p.chatErr }

// Parse reads an OpenAI request body of the given kind in one pass. A body
// the router cannot accept gives a 400 *Error naming the field.
func Parse(kind Kind, body []byte) (*Parsed, error) {
	s := bodyScan{kind: kind}
	if err := s.run(body); err != nil {
		if !utf8.Valid(body) { // whatever else is wrong, as vLLM says first
			return nil, badRequest("", "request body is not valid UTF-8")
		}
		return nil, badRequest("", "request body is not a JSON object: %v", err)
	}
	p := &Parsed{Kind: kind, Body: body}
	var err error
	// A Responses request may leave the model to the server.
	if p.Model, err = s.model.text("model", kind != KindResponses); err != nil {
		return nil, err
	}
	if p.Model == "" && !s.model.absent() {
		return nil, badRequest("model", "model must not be empty")
	}
	if p.CacheSalt, err = s.cacheSalt.text("cache_salt", false); err != nil {
		return nil, err
	}
	if p.Stream, _, err = s.stream.boolean("stream"); err != nil {
		return nil, err
	}
	switch kind {
	case KindCompletion:
		err = s.prompt.check(p)
	case KindChat:
		p.Chat, err = s.chatRequest()
		p.chatErr = s.chat.Limit
	case KindMessages:
		err = s.messagesRequest(p)
	case KindResponses:
		err = s.responsesRequest(p)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// text returns a string member's value.
func (m *member) text(name string, required bool) (string, error) {
	if m.absent() {
		if required {
			return "", badRequest(name, "%s is required", name)
		}
		return "", nil
	}
	if m.kind != jsonlex.String {
		return "", badRequest(name, "%s must be a string", name)
	}
	return m.str, nil
}

// boolean returns a bool member's value, and whether it was given.
func (m *member) boolean(name string) (value, present bool, err error) {
	if m.absent() {
		return false, false, nil
	}
	if m.kind != jsonlex.Bool {
		return false, false, badRequest(name, "%s must be a boolean", name)
	}
	return m.b, true, nil
}

// check sets the prompt of p, or says what is wrong with it.
func (ps *promptScan) check(p *Parsed) error {
	switch ps.kind {
	case jsonlex.Invalid, jsonlex.Null:
		return badRequest("prompt", "prompt is required")
	case jsonlex.String:
		p.Prompt = ps.text
		return nil
	case jsonlex.Array:
	default:
		return badRequest("prompt", "prompt must be a string, a list of strings or a list of token ids")
	}
	if ps.n == 0 {
		return badRequest("prompt", "prompt must not be empty")
	}
	if kinds := ps.kinds; (kinds[0] && kinds[1]) || (kinds[0] && kinds[2]) || (kinds[1] && kinds[2]) {
		return badRequest("prompt", "a list prompt must hold only strings or only token ids")
	}
	bad := badRequest("prompt", "prompt token ids must be integers in [0, 2^32)")
	switch ps.first {
	case jsonlex.String:
		p.Prompt = ps.text
	case jsonlex.Array:
		if ps.badLists {
			return bad
		}
		p.PromptTokens = ps.firstIDs
	default:
		if ps.badIDs {
			return bad
		}
		p.PromptTokens = ps.ids
	}
	return nil
}

// chatRequest checks the chat members as vLLM's schema would (messages a
// non-empty list of objects with a role, and so on) and returns the
// template's input.
func (s *bodyScan) chatRequest() (*chat.Request, error) {
	f := &s.chat
	msgs, ok := f.Messages.(*jinja.List)
	if !ok {
		return nil, badRequest("messages", "messages must be a list of message objects")
	}
	for i, m := range msgs.Items {
		d, ok := m.(*jinja.Dict)
		if !ok {
			return nil, badRequest("messages", "messages must be a list of message objects")
		}
		role, _ := d.Get("role")
		if _, ok := role.(string); !ok {
			name := fmt.Sprintf("messages[%d].role", i)
			if role == nil {
				return nil, badRequest(name, "%s is required", name)
			}
			return nil, badRequest(name, "%s must be a string", name)
		}
	}
	if len(msgs.Items) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	if err := s.checkChatTypes(); err != nil {
		return nil, err
	}
	req, err := f.Request()
	if err != nil { // the checks above are stricter
		return nil, badRequest("", "%v", err)
	}
	return req, nil
}

// checkChatTypes checks the types of the chat members but messages.
func (s *bodyScan) checkChatTypes() error {
	f := &s.chat
	for _, l := range []struct {
		name string
		v    jinja.Value
	}{{"tools", f.Tools}, {"documents", f.Documents}} {
		if _, ok := l.v.(*jinja.List); l.v != nil && !ok {
			return badRequest(l.name, "%s must be a list", l.name)
		}
	}
	if _, ok := f.Kwargs.(*jinja.Dict); f.Kwargs != nil && !ok {
		return badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
	}
	if _, ok := f.ChatTemplate.(string); f.ChatTemplate != nil && !ok {
		return badRequest("chat_template", "chat_template must be a string")
	}
	if _, ok := f.ReasoningEffort.(string); f.ReasoningEffort != nil && !ok {
		return badRequest("reasoning_effort", "reasoning_effort must be a string")
	}
	for _, flag := range []struct {
		name string
		v    jinja.Value
	}{
		{"add_generation_prompt", f.AddGenerationPrompt},
		{"continue_final_message", f.ContinueFinalMessage},
		{"add_special_tokens", f.AddSpecialTokens},
	} {
		if _, ok := flag.v.(bool); flag.v != nil && !ok {
			return badRequest(flag.name, "%s must be a boolean", flag.name)
		}
	}
	return nil
}
