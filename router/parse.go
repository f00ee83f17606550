package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Kind is the OpenAI endpoint a request is for.
type Kind uint8

// The endpoints the router understands. Anything else is routed by load.
const (
	KindOther Kind = iota
	KindCompletion
	KindChat
)

func (k Kind) String() string {
	switch k {
	case KindCompletion:
		return "completion"
	case KindChat:
		return "chat"
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
	// Chat: everything that changes the rendered prompt.
	Chat *ChatRequest
}

// ChatRequest holds the fields of /v1/chat/completions that change the
// prompt vLLM renders. JSON values the chat template reads are kept raw.
type ChatRequest struct {
	Messages               json.RawMessage
	Tools                  json.RawMessage
	Documents              json.RawMessage
	ChatTemplate           string
	ChatTemplateKwargs     json.RawMessage
	AddGenerationPrompt    bool // default true
	ContinueFinalMessage   bool
	AddSpecialTokens       bool // default false
	ReasoningEffort        string
	HasAddGenerationPrompt bool // the field was present
}

// rawBody is the wire form; every field is decoded lazily so wrong types are
// reported by name.
type rawBody struct {
	Model                json.RawMessage `json:"model"`
	Prompt               json.RawMessage `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	Documents            json.RawMessage `json:"documents"`
	ChatTemplate         json.RawMessage `json:"chat_template"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  json.RawMessage `json:"add_generation_prompt"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
	AddSpecialTokens     json.RawMessage `json:"add_special_tokens"`
	ReasoningEffort      json.RawMessage `json:"reasoning_effort"`
	CacheSalt            json.RawMessage `json:"cache_salt"`
	Stream               json.RawMessage `json:"stream"`
}

// Parse reads an OpenAI request body of the given kind. A body the router
// cannot accept gives a 400 *Error naming the field.
func Parse(kind Kind, body []byte) (*Parsed, error) {
	if !utf8.Valid(body) {
		return nil, badRequest("", "request body is not valid UTF-8")
	}
	var raw rawBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return nil, badRequest("", "request body is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, badRequest("", "request body has data after the JSON object")
	}
	p := &Parsed{Kind: kind}
	var err error
	if p.Model, err = stringField("model", raw.Model, true); err != nil {
		return nil, err
	}
	if p.Model == "" {
		return nil, badRequest("model", "model must not be empty")
	}
	if p.CacheSalt, err = stringField("cache_salt", raw.CacheSalt, false); err != nil {
		return nil, err
	}
	if p.Stream, _, err = boolField("stream", raw.Stream); err != nil {
		return nil, err
	}
	switch kind {
	case KindCompletion:
		err = parsePrompt(p, raw.Prompt)
	case KindChat:
		p.Chat, err = parseChat(&raw)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

func isNull(v json.RawMessage) bool {
	return len(v) == 0 || string(v) == "null"
}

func stringField(name string, v json.RawMessage, required bool) (string, error) {
	if isNull(v) {
		if required {
			return "", badRequest(name, "%s is required", name)
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", badRequest(name, "%s must be a string", name)
	}
	return s, nil
}

func boolField(name string, v json.RawMessage) (value, present bool, err error) {
	if isNull(v) {
		return false, false, nil
	}
	if err := json.Unmarshal(v, &value); err != nil {
		return false, false, badRequest(name, "%s must be a boolean", name)
	}
	return value, true, nil
}

// parsePrompt reads a completion prompt: a string, a list of strings (a
// batch: the router routes by the first), a list of token ids, or a list of
// lists of token ids.
func parsePrompt(p *Parsed, v json.RawMessage) error {
	if isNull(v) {
		return badRequest("prompt", "prompt is required")
	}
	switch v[0] {
	case '"':
		return json.Unmarshal(v, &p.Prompt)
	case '[':
	default:
		return badRequest("prompt", "prompt must be a string, a list of strings or a list of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return badRequest("prompt", "prompt is not a valid JSON array")
	}
	if len(items) == 0 {
		return badRequest("prompt", "prompt must not be empty")
	}
	switch items[0][0] {
	case '"':
		var ss []string
		if err := json.Unmarshal(v, &ss); err != nil {
			return badRequest("prompt", "a list prompt must hold only strings or only token ids")
		}
		p.Prompt = ss[0]
		return nil
	case '[':
		var lists [][]uint32
		if err := json.Unmarshal(v, &lists); err != nil {
			return badRequest("prompt", "prompt token ids must be integers in [0, 2^32)")
		}
		p.PromptTokens = lists[0]
	default:
		if err := json.Unmarshal(v, &p.PromptTokens); err != nil {
			return badRequest("prompt", "prompt token ids must be integers in [0, 2^32)")
		}
	}
	return nil
}

func parseChat(raw *rawBody) (*ChatRequest, error) {
	if isNull(raw.Messages) || raw.Messages[0] != '[' {
		return nil, badRequest("messages", "messages must be a list of message objects")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw.Messages, &msgs); err != nil {
		return nil, badRequest("messages", "messages must be a list of message objects")
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	for i, m := range msgs {
		if _, err := stringField(fmt.Sprintf("messages[%d].role", i), m["role"], true); err != nil {
			return nil, err
		}
	}
	c := &ChatRequest{Messages: raw.Messages, AddGenerationPrompt: true}
	for name, v := range map[string]json.RawMessage{"tools": raw.Tools, "documents": raw.Documents} {
		if !isNull(v) && v[0] != '[' {
			return nil, badRequest(name, "%s must be a list", name)
		}
	}
	if !isNull(raw.Tools) {
		c.Tools = raw.Tools
	}
	if !isNull(raw.Documents) {
		c.Documents = raw.Documents
	}
	if !isNull(raw.ChatTemplateKwargs) {
		if raw.ChatTemplateKwargs[0] != '{' {
			return nil, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
		}
		c.ChatTemplateKwargs = raw.ChatTemplateKwargs
	}
	var err error
	if c.ChatTemplate, err = stringField("chat_template", raw.ChatTemplate, false); err != nil {
		return nil, err
	}
	if c.ReasoningEffort, err = stringField("reasoning_effort", raw.ReasoningEffort, false); err != nil {
		return nil, err
	}
	var present bool
	if v, ok, err := boolField("add_generation_prompt", raw.AddGenerationPrompt); err != nil {
		return nil, err
	} else if ok {
		c.AddGenerationPrompt, present = v, true
	}
	c.HasAddGenerationPrompt = present
	if c.ContinueFinalMessage, _, err = boolField("continue_final_message", raw.ContinueFinalMessage); err != nil {
		return nil, err
	}
	if c.AddSpecialTokens, _, err = boolField("add_special_tokens", raw.AddSpecialTokens); err != nil {
		return nil, err
	}
	return c, nil
}
