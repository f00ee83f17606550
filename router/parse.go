package router

import (
	"encoding/json"
	"fmt"
	"strconv"
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
	// Body is the request body as received.
	Body []byte
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

// rawBody holds the top-level fields the router reads, as raw JSON.
type rawBody struct {
	Model, Prompt, Messages, Tools, Documents             []byte
	ChatTemplate, ChatTemplateKwargs, AddGenerationPrompt []byte
	ContinueFinalMessage, AddSpecialTokens                []byte
	ReasoningEffort, CacheSalt, Stream                    []byte
}

// field returns where the raw value of a top-level key goes, or nil.
func (r *rawBody) field(key string) *[]byte {
	switch key {
	case "model":
		return &r.Model
	case "prompt":
		return &r.Prompt
	case "messages":
		return &r.Messages
	case "tools":
		return &r.Tools
	case "documents":
		return &r.Documents
	case "chat_template":
		return &r.ChatTemplate
	case "chat_template_kwargs":
		return &r.ChatTemplateKwargs
	case "add_generation_prompt":
		return &r.AddGenerationPrompt
	case "continue_final_message":
		return &r.ContinueFinalMessage
	case "add_special_tokens":
		return &r.AddSpecialTokens
	case "reasoning_effort":
		return &r.ReasoningEffort
	case "cache_salt":
		return &r.CacheSalt
	case "stream":
		return &r.Stream
	}
	return nil
}

// Parse reads an OpenAI request body of the given kind. A body the router
// cannot accept gives a 400 *Error naming the field.
func Parse(kind Kind, body []byte) (*Parsed, error) {
	if !utf8.Valid(body) {
		return nil, badRequest("", "request body is not valid UTF-8")
	}
	var raw rawBody
	err := scanObject(body, func(key string, v []byte) error {
		if f := raw.field(key); f != nil {
			*f = v // the last of repeated keys wins, as in encoding/json
		}
		return nil
	})
	if err != nil {
		return nil, badRequest("", "request body is not a JSON object: %v", err)
	}
	p := &Parsed{Kind: kind, Body: body}
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

func isNull(v []byte) bool {
	return len(v) == 0 || string(v) == "null"
}

// stringField decodes a raw value the scanner validated as a string.
func stringField(name string, v []byte, required bool) (string, error) {
	if isNull(v) {
		if required {
			return "", badRequest(name, "%s is required", name)
		}
		return "", nil
	}
	if v[0] != '"' {
		return "", badRequest(name, "%s must be a string", name)
	}
	return unquote(v), nil
}

func boolField(name string, v []byte) (value, present bool, err error) {
	switch string(v) {
	case "", "null":
		return false, false, nil
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, badRequest(name, "%s must be a boolean", name)
}

// parsePrompt reads a completion prompt: a string, a list of strings (a
// batch: the router routes by the first), a list of token ids, or a list of
// lists of token ids.
func parsePrompt(p *Parsed, v []byte) error {
	if isNull(v) {
		return badRequest("prompt", "prompt is required")
	}
	switch v[0] {
	case '"':
		p.Prompt = unquote(v)
		return nil
	case '[':
	default:
		return badRequest("prompt", "prompt must be a string, a list of strings or a list of token ids")
	}
	var first []byte
	n := 0
	kinds := map[byte]bool{}
	_ = scanArray(v, func(e []byte) error { // v is valid JSON: no error
		if n == 0 {
			first = e
		}
		kind := e[0]
		if kind != '"' && kind != '[' {
			kind = '0' // a number, or something tokenIDs refuses
		}
		kinds[kind] = true
		n++
		return nil
	})
	if n == 0 {
		return badRequest("prompt", "prompt must not be empty")
	}
	if len(kinds) > 1 {
		return badRequest("prompt", "a list prompt must hold only strings or only token ids")
	}
	var err error
	switch first[0] {
	case '"':
		p.Prompt = unquote(first)
	case '[':
		if err = checkTokenLists(v); err == nil {
			p.PromptTokens, err = tokenIDs(first)
		}
	default:
		p.PromptTokens, err = tokenIDs(v)
	}
	return err
}

// checkTokenLists checks every element of a list of token-id lists.
func checkTokenLists(v []byte) error {
	return scanArray(v, func(e []byte) error {
		_, err := tokenIDs(e)
		return err
	})
}

// tokenIDs decodes a JSON array of integers in [0, 2^32).
func tokenIDs(v []byte) ([]uint32, error) {
	bad := badRequest("prompt", "prompt token ids must be integers in [0, 2^32)")
	if v[0] != '[' {
		return nil, bad
	}
	ids := make([]uint32, 0, len(v)/4)
	err := scanArray(v, func(e []byte) error {
		n, err := strconv.ParseUint(string(e), 10, 32)
		if err != nil {
			return bad
		}
		ids = append(ids, uint32(n))
		return nil
	})
	if err != nil {
		return nil, bad
	}
	return ids, nil
}

func parseChat(raw *rawBody) (*ChatRequest, error) {
	if isNull(raw.Messages) || raw.Messages[0] != '[' {
		return nil, badRequest("messages", "messages must be a list of message objects")
	}
	n := 0
	err := scanArray(raw.Messages, func(m []byte) error {
		if m[0] != '{' {
			return badRequest("messages", "messages must be a list of message objects")
		}
		var role []byte
		_ = scanObject(m, func(k string, v []byte) error { // m is valid JSON
			if k == "role" {
				role = v
			}
			return nil
		})
		_, err := stringField(fmt.Sprintf("messages[%d].role", n), role, true)
		n++
		return err
	})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	c := &ChatRequest{Messages: raw.Messages, AddGenerationPrompt: true}
	for name, v := range map[string][]byte{"tools": raw.Tools, "documents": raw.Documents} {
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
