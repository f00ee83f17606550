package chat

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// Request is what of an OpenAI chat completions request changes the
// prompt vLLM renders and tokenizes.
type Request struct {
	// Messages are the request's messages as sent (dicts).
	Messages []jinja.Value
	// Tools are the request's tools; nil when absent.
	Tools *jinja.List
	// Documents are the request's documents; nil when absent.
	Documents jinja.Value
	// AddGenerationPrompt appends the assistant header (default true).
	AddGenerationPrompt bool
	// ContinueFinalMessage leaves the final message open.
	ContinueFinalMessage bool
	// AddSpecialTokens makes the encoding add BOS/EOS (default false).
	AddSpecialTokens bool
	// ChatTemplate replaces the model's template when not empty.
	ChatTemplate string
	// Kwargs are chat_template_kwargs (e.g. enable_thinking); nil: none.
	Kwargs *jinja.Dict

	media    mediaStyle // how a rendering shows media items (RenderMedia)
	hasMedia bool       // a message has a media part (HasMedia)
}

// ParseRequest reads the prompt-relevant fields of a chat completions
// request body, keeping the key order of every object: one walk of the
// body handing each member to Fields.Decode, as router.Parse's walk does.
func ParseRequest(body []byte) (*Request, error) {
	lx := jsonlex.New(body, jsonlex.Options{})
	if lx.Peek() != jsonlex.Object {
		return nil, errors.New("tokenizer: chat request: want a JSON object")
	}
	var f Fields
	err := lx.Object(func(key []byte) error {
		if ok, err := f.Decode(key, lx); ok {
			return err
		}
		return lx.Skip()
	})
	if err == nil {
		err = lx.End()
	}
	if err == nil {
		err = f.Limit
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat request: %w", err)
	}
	return f.Request()
}

// Fields are the members of a chat completions request body that the chat
// template reads, each as read (nil when absent or null), gathered during
// one walk of the body: the walker hands every member to Decode (a
// repeated key's last value wins, as in json.loads), then Request checks
// them and builds the template's input.
type Fields struct {
	Messages, Tools, Documents, Kwargs, ChatTemplate            jinja.Value
	AddGenerationPrompt, ContinueFinalMessage, AddSpecialTokens jinja.Value
	ReasoningEffort                                             jinja.Value
	// Limit is the first error wrapping jinja.ErrLimit a member gave (JSON
	// nested deeper than jinja reads, an integer outside int64): the
	// member was read with those parts missing, and the request cannot be
	// rendered.
	Limit error
}

// Decode reads the value lx is at into the field of the member key when
// the template reads that member, and reports whether it did; for any
// other key it reads nothing. Its errors are lx's.
func (f *Fields) Decode(key []byte, lx *jsonlex.Lexer) (bool, error) {
	var dst *jinja.Value
	switch string(key) {
	case "messages":
		dst = &f.Messages
	case "tools":
		dst = &f.Tools
	case "documents":
		dst = &f.Documents
	case "chat_template_kwargs":
		dst = &f.Kwargs
	case "chat_template":
		dst = &f.ChatTemplate
	case "add_generation_prompt":
		dst = &f.AddGenerationPrompt
	case "continue_final_message":
		dst = &f.ContinueFinalMessage
	case "add_special_tokens":
		dst = &f.AddSpecialTokens
	case "reasoning_effort":
		dst = &f.ReasoningEffort
	default:
		return false, nil
	}
	return true, decodeMember(dst, lx, &f.Limit)
}

// Request checks the fields' types and returns the template's input;
// Limit is the caller's to check.
func (f *Fields) Request() (*Request, error) {
	req := &Request{AddGenerationPrompt: true, Documents: f.Documents}
	msgs, ok := f.Messages.(*jinja.List)
	if !ok {
		return nil, errors.New("tokenizer: chat request: messages must be a list")
	}
	req.Messages, req.hasMedia = msgs.Items, hasMediaPart(msgs.Items)
	if f.Tools != nil {
		if req.Tools, ok = f.Tools.(*jinja.List); !ok {
			return nil, errors.New("tokenizer: chat request: tools must be a list")
		}
	}
	if err := f.readFlags(req); err != nil {
		return nil, err
	}
	if f.Kwargs != nil {
		if req.Kwargs, ok = f.Kwargs.(*jinja.Dict); !ok {
			return nil, errors.New("tokenizer: chat request: chat_template_kwargs must be an object")
		}
	}
	if f.ChatTemplate != nil {
		if req.ChatTemplate, ok = f.ChatTemplate.(string); !ok {
			return nil, errors.New("tokenizer: chat request: chat_template must be a string")
		}
	}
	if f.ReasoningEffort != nil {
		effort, ok := f.ReasoningEffort.(string)
		if !ok {
			return nil, errors.New("tokenizer: chat request: reasoning_effort must be a string")
		}
		// vLLM passes it to the template, with enable_thinking unless the
		// client's kwargs set that (ChatCompletionRequest.build_chat_params).
		kw, err := templateKwargs(f.Kwargs, "reasoning_effort", effort, "enable_thinking", enableThinking(f.Kwargs, effort))
		if err != nil {
			return nil, err
		}
		req.Kwargs = kw
	}
	return req, nil
}

func (f *Fields) readFlags(req *Request) error {
	for _, flag := range []struct {
		name string
		v    jinja.Value
		dst  *bool
	}{
		{"add_generation_prompt", f.AddGenerationPrompt, &req.AddGenerationPrompt},
		{"continue_final_message", f.ContinueFinalMessage, &req.ContinueFinalMessage},
		{"add_special_tokens", f.AddSpecialTokens, &req.AddSpecialTokens},
	} {
		if flag.v == nil {
			continue
		}
		b, ok := flag.v.(bool)
		if !ok {
			return fmt.Errorf("tokenizer: chat request: %s must be a boolean", flag.name)
		}
		*flag.dst = b
	}
	return nil
}

// get returns d[key], or nil when absent (or d is nil).
func get(d *jinja.Dict, key string) jinja.Value {
	if d == nil {
		return nil
	}
	v, _ := d.Get(key)
	return v
}

// conversation turns request messages into what vLLM hands the template:
// text parts joined by "\n" (or, when the template loops over content, a
// list of {"type": "text", "text": ...}), media parts as media renders them,
// tool_calls, tool_call_id, name and reasoning kept, and tool call
// arguments given as JSON strings parsed.
func conversation(msgs []jinja.Value, parts bool, media mediaStyle) ([]jinja.Value, error) {
	out := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d, ok := m.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tokenizer: chat: message %d is not an object", i)
		}
		msg, err := convertMessage(d, parts, media)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: chat: message %d: %w", i, err)
		}
		out[i] = msg
	}
	for _, m := range out {
		if role, _ := get(m.(*jinja.Dict), "role").(string); role == "developer" {
			return consolidateSystem(out), nil
		}
	}
	return out, nil
}

func convertMessage(d *jinja.Dict, parts bool, media mediaStyle) (*jinja.Dict, error) {
	role, ok := get(d, "role").(string)
	if !ok {
		return nil, errors.New("role must be a string")
	}
	items, err := contentParts(get(d, "content"))
	if err != nil {
		return nil, err
	}
	msg := jinja.NewDict()
	msg.SetString("role", role)
	if parts && role != "tool" { // vLLM flattens tool messages of text parts
		list := make([]jinja.Value, len(items))
		for i, it := range items {
			p := jinja.NewDict()
			switch {
			case it.modality == "":
				p.SetString("type", "text")
				p.SetString("text", it.text)
			case media.asText != "": // the other rendering, to find where media start
				p.SetString("type", "text")
				p.SetString("text", media.asText)
			default: // as vLLM hands a media item to a template
				p.SetString("type", it.modality)
			}
			list[i] = p
		}
		msg.SetString("content", jinja.NewList(list...))
	} else {
		// vLLM puts one placeholder per media item before the text (its
		// model's placeholder string; kvrouter's media.placeholder).
		var texts, placeholders []string
		for _, it := range items {
			if it.modality == "" {
				texts = append(texts, it.text)
			} else {
				placeholders = append(placeholders, media.placeholder)
			}
		}
		text := strings.Join(texts, "\n")
		if len(placeholders) > 0 {
			text = strings.Join(append(placeholders, text), "\n")
		}
		msg.SetString("content", text)
	}
	if err := copyExtras(d, msg, role); err != nil {
		return nil, err
	}
	return msg, nil
}

// contentPart is a message's content part: text, or a media item of a
// modality (image, audio, video).
type contentPart struct {
	text     string
	modality string
}

func contentParts(content jinja.Value) ([]contentPart, error) {
	switch c := content.(type) {
	case nil:
		return nil, nil
	case string:
		return []contentPart{{text: c}}, nil
	case *jinja.List:
		items := make([]contentPart, 0, len(c.Items))
		for _, p := range c.Items {
			it, skip, err := part(p)
			if err != nil {
				return nil, err
			}
			if !skip {
				items = append(items, it)
			}
		}
		return items, nil
	}
	return nil, errors.New("content must be a string, a list of parts or null")
}

// mediaParts maps vLLM's media content part types to their modality.
var mediaParts = map[string]string{
	"image_url": "image", "input_image": "image", "image_embeds": "image", "image_pil": "image",
	"audio_url": "audio", "input_audio": "audio", "audio_embeds": "audio",
	"video_url": "video", "video_embeds": "video",
}

// textParts maps vLLM's text content part types to the field holding
// their text.
var textParts = map[string]string{"text": "text", "refusal": "refusal", "input_text": "text", "output_text": "text"}

// part reads one content part: a text part's text (skip when null: vLLM
// skips it), or a media part's modality. A media part's payload (URL,
// base64 data, embeddings) is not read: the pod fetches and processes it.
func part(p jinja.Value) (it contentPart, skip bool, err error) {
	if s, ok := p.(string); ok {
		return contentPart{text: s}, false, nil
	}
	d, ok := p.(*jinja.Dict)
	if !ok {
		return it, false, fmt.Errorf("unsupported content part %v", p)
	}
	typ, _ := get(d, "type").(string)
	if m, ok := mediaParts[typ]; ok {
		return contentPart{modality: m}, false, nil
	}
	field, ok := textParts[typ]
	if !ok {
		return it, false, fmt.Errorf("unsupported content part type %q", typ)
	}
	switch t := get(d, field).(type) {
	case nil:
		return it, true, nil
	case string:
		return contentPart{text: t}, false, nil
	}
	return it, false, fmt.Errorf("%s part without a string %s", typ, field)
}

// copyExtras copies what vLLM keeps besides role and content.
func copyExtras(d, msg *jinja.Dict, role string) error {
	reasoning := get(d, "reasoning")
	if reasoning == nil {
		reasoning = get(d, "reasoning_content")
	}
	switch role {
	case "assistant":
		if calls := get(d, "tool_calls"); calls != nil {
			l, ok := calls.(*jinja.List)
			if !ok {
				return errors.New("tool_calls must be a list")
			}
			if len(l.Items) > 0 { // vLLM drops an empty list
				parsed, err := parseToolCalls(l)
				if err != nil {
					return err
				}
				msg.SetString("tool_calls", parsed)
			}
		}
		if reasoning != nil {
			msg.SetString("reasoning", reasoning)
			msg.SetString("reasoning_content", reasoning)
		}
	case "tool":
		if id, ok := d.Get("tool_call_id"); ok {
			msg.SetString("tool_call_id", id)
		}
	}
	if name, ok := get(d, "name").(string); ok {
		msg.SetString("name", name)
	}
	return nil
}

func truthyJSON(v jinja.Value) bool {
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	case bool:
		return x
	}
	return true
}

// isPySpace is Python's str.isspace for one character.
func isPySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }
