package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvrouter/kvrouter/tokenizer"

	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// ErrNoChatTemplate is returned when neither the request, the
// configuration nor the model's files give a chat template.
var ErrNoChatTemplate = errors.New("tokenizer: no chat template")

// specialTokenFields are transformers' special token attributes, in the
// order of its special_tokens_map.
var specialTokenFields = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// Template renders chat requests with a model's chat template exactly as
// vLLM does (through transformers and jinja2). It is safe for concurrent
// use.
//
// gpt-oss is the exception: vLLM renders gpt-oss chat requests with the
// openai_harmony library, not with the model's chat template, so for gpt-oss
// a Template renders what the template (and so transformers) gives, which can
// differ from the prompt vLLM tokenizes.
type Template struct {
	template string            // the template a request without one uses; "" see named
	named    map[string]string // tokenizer_config.json's named templates; nil: none
	toolUse  string            // the named "tool_use" template, for requests with tools; "": none
	format   ContentFormat
	source   string         // where an override came from, for errors; "" none
	special  map[string]any // special token strings for the context
	cache    *jinja.Cache
}

// Load reads a model's chat template and special tokens from dir
// (tokenizer_config.json, chat_template.jinja). A non-empty override
// replaces the model's template, as vLLM's --chat-template does.
func Load(dir, override string) (*Template, error) {
	return LoadWith(dir, Options{Template: override})
}

// LoadWith is Load with a model's chat options.
func LoadWith(dir string, opt Options) (*Template, error) {
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return NewWith(cfg, string(tmpl), opt)
}

// New builds a Template from the contents of tokenizer_config.json (nil:
// none) and chat_template.jinja ("": none). The template is, in order of
// precedence: override, chat_template.jinja, tokenizer_config.json's
// chat_template (a string, or the entry named "default" of a list).
func New(configJSON []byte, templateFile, override string) (*Template, error) {
	return NewWith(configJSON, templateFile, Options{Template: override})
}

// NewWith is New with a model's chat options. An override naming one of
// the model's named templates stands for that template.
func NewWith(configJSON []byte, templateFile string, opt Options) (*Template, error) {
	format, err := ParseContentFormat(string(opt.ContentFormat))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat: %w", err)
	}
	c := &Template{special: map[string]any{}, cache: jinja.NewCache(jinja.DefaultLimits(), 16), format: format, source: opt.Source}
	var cfg map[string]json.RawMessage
	if len(configJSON) > 0 {
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
		}
	}
	if err := c.readSpecial(cfg); err != nil {
		return nil, err
	}
	t, named, err := configTemplate(cfg["chat_template"])
	if err != nil {
		return nil, err
	}
	c.named = named
	if opt.Named != "" {
		t, ok := named[opt.Named]
		if !ok {
			return nil, fmt.Errorf("%w%s: the model has no chat template named %q (named: %s)", ErrNoChatTemplate, c.from(), opt.Named, names(named))
		}
		opt.Template = t
	}
	switch {
	case opt.Template != "" && named[opt.Template] != "":
		c.template = named[opt.Template]
	case opt.Template != "":
		c.template = opt.Template
	case templateFile != "":
		c.template = templateFile
	default:
		c.template, c.toolUse = t, named["tool_use"]
	}
	if opt.Template != "" {
		if _, err := c.cache.Get(c.template); err != nil {
			return nil, fmt.Errorf("tokenizer: chat template%s: %w", c.from(), err)
		}
	}
	return c, nil
}

func tokenString(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content, obj.Content != ""
	}
	return "", false
}

func (c *Template) readSpecial(cfg map[string]json.RawMessage) error {
	for _, f := range specialTokenFields {
		if s, ok := tokenString(cfg[f]); ok {
			c.special[f] = s
		}
	}
	var extra []json.RawMessage
	if raw := cfg["additional_special_tokens"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &extra); err != nil {
			return fmt.Errorf("tokenizer: tokenizer_config.json: additional_special_tokens: %w", err)
		}
	}
	var list []jinja.Value
	for _, e := range extra {
		if s, ok := tokenString(e); ok {
			list = append(list, s)
		}
	}
	if len(list) > 0 {
		c.special["additional_special_tokens"] = jinja.NewList(list...)
	}
	return nil
}

// Template returns the chat template a request would use without its own.
func (c *Template) Template() string { return c.template }

// Render renders a chat request to the prompt text vLLM would tokenize.
func (c *Template) Render(req *Request) (string, error) {
	return c.renderWith(req, jinja.RenderOptions{})
}

// Encode renders a chat request and encodes the prompt with tok, adding
// special tokens only when the request asks (vLLM's default is not to).
func (c *Template) Encode(tok *tokenizer.Tokenizer, req *Request) ([]uint32, error) {
	return c.AppendEncode(nil, tok, req)
}

// AppendEncode is Encode appending the ids to dst.
func (c *Template) AppendEncode(dst []uint32, tok *tokenizer.Tokenizer, req *Request) ([]uint32, error) {
	text, err := c.Render(req)
	if err != nil {
		return dst, err
	}
	return tok.AppendEncode(dst, text, req.AddSpecialTokens)
}

func (c *Template) renderWith(req *Request, opt jinja.RenderOptions) (string, error) {
	in, err := c.prepare(req)
	if err != nil {
		return "", err
	}
	if opt.SizeHint == 0 {
		opt.SizeHint = renderSize(in.ctx)
	}
	out, err := in.tmpl.RenderWith(in.ctx, opt)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat template%s: %w", c.from(), err)
	}
	if in.cont {
		return continueFinal(out, in.last)
	}
	return out, nil
}

// templateInput is what a request hands the chat template.
type templateInput struct {
	src  string
	tmpl *jinja.Template
	ctx  map[string]jinja.Value
	cont bool        // cut the render after last (continue_final_message)
	last jinja.Value // the final message
}

// prepare resolves the template and builds its context from the request
// as vLLM and transformers do.
func (c *Template) prepare(req *Request) (templateInput, error) {
	src, err := c.pick(req)
	if err != nil {
		return templateInput{}, err
	}
	p := resolveParams(req)
	if (req.AddGenerationPrompt && req.ContinueFinalMessage) || (p.truthy(p.gen) && p.truthy(p.cont)) {
		return templateInput{}, errors.New("tokenizer: chat: add_generation_prompt and continue_final_message cannot both be true")
	}
	t, err := c.cache.Get(src)
	if err != nil {
		return templateInput{}, fmt.Errorf("tokenizer: chat template%s: %w", c.from(), err)
	}
	parts := c.format == FormatOpenAI || (c.format == FormatAuto && t.LoopsOverContent())
	conv, err := conversation(req.Messages, parts, req.media)
	if err != nil {
		return templateInput{}, err
	}
	in := templateInput{src: src, tmpl: t, ctx: c.context(p, conv)}
	if p.truthy(p.cont) && len(conv) > 0 {
		in.cont, in.last = true, conv[len(conv)-1]
	}
	return in, nil
}

// renderParams are apply_chat_template's arguments after vLLM merged
// chat_template_kwargs over the request's own fields.
type renderParams struct {
	gen, cont, tools, documents jinja.Value
	extra                       *jinja.Dict // the remaining kwargs, for the template
}

// consumedKwargs are apply_chat_template parameters that never reach the
// template (or that vLLM drops).
var consumedKwargs = map[string]bool{
	"chat_template": true, "tokenize": true, "padding": true, "truncation": true, "max_length": true,
	"return_tensors": true, "return_dict": true, "return_assistant_tokens_mask": true, "tokenizer_kwargs": true,
}

func resolveParams(req *Request) renderParams {
	p := renderParams{gen: req.AddGenerationPrompt, cont: req.ContinueFinalMessage, documents: req.Documents, extra: jinja.NewDict()}
	if req.Tools != nil {
		p.tools = dumpTools(req.Tools)
	}
	if req.Kwargs == nil {
		return p
	}
	for i, k := range req.Kwargs.Keys() {
		v := req.Kwargs.Values()[i]
		switch k {
		case "add_generation_prompt":
			p.gen = v
		case "continue_final_message":
			p.cont = v
		case "tools":
			p.tools = v
		case "documents":
			p.documents = v
		default:
			if s, ok := k.(string); ok && !consumedKwargs[s] {
				p.extra.SetString(s, v)
			}
		}
	}
	return p
}

// truthy is Python's bool() of a JSON value.
func (renderParams) truthy(v jinja.Value) bool {
	switch x := v.(type) {
	case *jinja.Dict:
		return x.Len() > 0
	case *jinja.List:
		return len(x.Items) > 0
	case int64:
		return x != 0
	case float64:
		return x != 0
	}
	return truthyJSON(v)
}

func (c *Template) context(p renderParams, conv []jinja.Value) map[string]jinja.Value {
	ctx := make(map[string]jinja.Value, len(c.special)+p.extra.Len()+4)
	for k, v := range c.special {
		ctx[k] = v
	}
	for i, k := range p.extra.Keys() {
		ctx[k.(string)] = p.extra.Values()[i]
	}
	ctx["messages"] = jinja.NewList(conv...)
	ctx["tools"] = p.tools
	ctx["documents"] = p.documents
	ctx["add_generation_prompt"] = p.gen
	return ctx
}

// renderSize estimates the length of a chat render from its context: the
// strings in it (message texts, tools, documents, kwargs) with room for
// the template's markup around each, tools and documents twice (templates
// print them as indented JSON or as code), plus 1 KiB of the template's
// own text, so that the render allocates its output once. When a template
// writes more, the output grows once.
func renderSize(ctx map[string]jinja.Value) int {
	n := 1024
	for k, v := range ctx {
		n += textSize(v)
		if k == "tools" || k == "documents" {
			n += textSize(v)
		}
	}
	return n
}

// textSize is the bytes of the strings in v, 8 more for each string and
// 8 for each other scalar.
func textSize(v jinja.Value) int {
	switch x := v.(type) {
	case string:
		return len(x) + 8
	case *jinja.List:
		n := 0
		for _, it := range x.Items {
			n += textSize(it)
		}
		return n
	case *jinja.Dict:
		n := 0
		for i, k := range x.Keys() {
			n += textSize(k) + textSize(x.Values()[i])
		}
		return n
	}
	return 8
}

// continueFinal cuts the render after the final message's text, as
// transformers does for continue_final_message.
func continueFinal(rendered string, last jinja.Value) (string, error) {
	msg := last.(*jinja.Dict)
	content, _ := msg.Get("content")
	final, ok := content.(string)
	if parts, isList := content.(*jinja.List); isList {
		ok = false
		for i := len(parts.Items) - 1; i >= 0 && !ok; i-- {
			if p, isDict := parts.Items[i].(*jinja.Dict); isDict {
				if t, has := p.Get("text"); has {
					final, ok = t.(string)
				}
			}
		}
	}
	if !ok {
		return "", errors.New("tokenizer: chat: continue_final_message: no text to continue in the final message")
	}
	stripped := strings.TrimFunc(final, isPySpace)
	loc := strings.LastIndex(rendered, stripped)
	if loc < 0 {
		return "", errors.New("tokenizer: chat: continue_final_message: the final message does not appear in the rendered chat")
	}
	left := strings.TrimLeftFunc(final, isPySpace)
	if left == final && strings.HasPrefix(rendered[loc:], final) {
		return rendered[:loc+len(left)], nil
	}
	return rendered[:loc+len(stripped)], nil
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(m json.RawMessage) bool {
	return len(m) == 0 || string(m) == "null"
}
