package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
	"github.com/kvrouter/kvrouter/tokenizer/models"
)

func newRenderCommand(s streams) *cobra.Command {
	var dir, templateFile, format string
	var r renderer
	var jsonl bool
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Render an OpenAI chat request read on stdin with the model's chat template",
		Long: `Render the OpenAI chat completions request read on stdin with the model's
chat template, as vLLM does, and print the prompt as a JSON string, or with
--tokens the token ids vLLM hashes into its prefix cache. --api messages or
responses reads an Anthropic Messages or OpenAI Responses body instead, as
vLLM converts it into a chat request.`,
		Example: `  echo '{"model":"m","messages":[{"role":"user","content":"Hi"}]}' | kvrouter render --tokenizer /models/qwen --tokens`,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&dir, "tokenizer", "", "directory holding tokenizer_config.json (and chat_template.jinja, tokenizer.json)")
	fs.StringVar(&templateFile, "chat-template", "", "a chat template replacing the model's, as vLLM's --chat-template and serve's: a file, the template's text, or the name of one of the model's named templates")
	fs.StringVar(&format, "chat-template-content-format", "auto", "how message content reaches the template, as vLLM's --chat-template-content-format: auto, string or openai")
	fs.StringVar(&r.api, "api", "chat", "the API of the request body: chat (/v1/chat/completions), messages (Anthropic, /v1/messages) or responses (OpenAI, /v1/responses)")
	fs.BoolVar(&r.tokens, "tokens", false, "print the token ids vLLM would hash instead of the prompt")
	fs.BoolVar(&jsonl, "jsonl", false, "read one request per line and write one result per line; failures give {\"error\": ...}")
	_ = cmd.MarkFlagRequired("tokenizer")
	_ = cmd.MarkFlagDirname("tokenizer")
	_ = cmd.MarkFlagFilename("chat-template")
	cmd.RunE = runE(func(cmd *cobra.Command) error {
		if err := checkDir("tokenizer", dir); err != nil {
			return fmt.Errorf("render: %w", err)
		}
		if r.kind = apiKinds[r.api]; r.kind == router.KindOther {
			return fmt.Errorf("render: --api %q: want chat, messages or responses", r.api)
		}
		if err := r.load(dir, templateFile, format); err != nil {
			return fmt.Errorf("render: %w", err)
		}
		w := bufio.NewWriter(s.out)
		var err error
		if jsonl {
			err = r.lines(cmd.InOrStdin(), w)
		} else {
			err = r.all(cmd.InOrStdin(), w)
		}
		if err != nil {
			return fmt.Errorf("render: %w", err)
		}
		return w.Flush()
	})
	return cmd
}

// apiKinds are the bodies `kvrouter render --api` reads.
var apiKinds = map[string]router.Kind{"chat": router.KindChat, "messages": router.KindMessages, "responses": router.KindResponses}

// renderer renders chat requests for `kvrouter render`.
type renderer struct {
	chat   *chat.Template
	tok    *tokenizer.Tokenizer // nil without --tokens
	tokens bool
	api    string      // --api
	kind   router.Kind // of api
}

func (r *renderer) load(dir, template, format string) error {
	opt, err := models.TemplateOptions("--chat-template", template)
	if err != nil {
		return fmt.Errorf("--chat-template: %w", err)
	}
	if opt.ContentFormat, err = chat.ParseContentFormat(format); err != nil {
		return fmt.Errorf("--chat-template-content-format: %w", err)
	}
	if r.chat, err = chat.LoadWith(dir, opt); err != nil {
		return err
	}
	if r.tokens {
		r.tok, err = tokenizer.Load(dir)
	}
	return err
}

func (r *renderer) all(stdin io.Reader, w *bufio.Writer) error {
	data, err := readInput(stdin)
	if err != nil {
		return err
	}
	return r.one(data, w)
}

func (r *renderer) lines(stdin io.Reader, w *bufio.Writer) error {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), maxTokenizeInput)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := r.one(sc.Bytes(), w); err != nil {
			if err := writeJSONLine(w, map[string]string{"error": err.Error()}); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	return nil
}

// one renders one request and writes its result line; nothing is written
// when it fails.
func (r *renderer) one(body []byte, w *bufio.Writer) error {
	var req *chat.Request
	var err error
	if r.kind == router.KindChat {
		req, err = chat.ParseRequest(body)
	} else {
		var p *router.Parsed
		if p, err = router.Parse(r.kind, body); err == nil {
			req, err = p.Chat, p.RenderErr()
		}
	}
	if err != nil {
		return err
	}
	text, err := r.chat.Render(req)
	if err != nil {
		return err
	}
	if r.tokens {
		return writeIDs(r.tok, req.AddSpecialTokens, text, w)
	}
	return writeJSONLine(w, text)
}

// writeJSONLine writes v as one JSON line without HTML escaping (prompts are
// full of "<|...|>").
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
