package chat

import "fmt"

// ContentFormat is how message content reaches the chat template, as
// vLLM's --chat-template-content-format.
type ContentFormat string

// The content formats.
const (
	// FormatAuto detects the format from the template, as vLLM does: openai
	// when it loops over a message's content, string otherwise.
	FormatAuto ContentFormat = "auto"
	// FormatString joins a message's text parts with "\n" into one string.
	FormatString ContentFormat = "string"
	// FormatOpenAI passes the parts as a list of {"type": "text", "text": ...}.
	FormatOpenAI ContentFormat = "openai"
)

// Options are a model's chat settings beyond its own files, as vLLM's
// --chat-template and --chat-template-content-format.
type Options struct {
	// Template replaces the model's chat template: the template's text, or
	// the name of one of the model's named templates (tokenizer_config.json's
	// chat_template list); "": the model's own.
	Template string
	// Named, instead of Template, names one of the model's named templates,
	// which must exist.
	Named string
	// Source says where Template came from, in errors (a setting, a file).
	Source string
	// ContentFormat is how message content reaches the template; "" is
	// FormatAuto.
	ContentFormat ContentFormat
}

// ParseContentFormat reads a content format: auto (or ""), string or
// openai.
func ParseContentFormat(s string) (ContentFormat, error) {
	switch f := ContentFormat(s); f {
	case "", FormatAuto:
		return FormatAuto, nil
	case FormatString, FormatOpenAI:
		return f, nil
	}
	return "", fmt.Errorf("content format %q: want auto, string or openai", s)
}
