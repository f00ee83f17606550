package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/kvrouter/kvrouter/tokenizer/chat"

	"github.com/kvrouter/kvrouter/tokenizer"
)

func runRender(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return renderChat(args, os.Stdin, stdout, stderr)
}

// renderer renders chat requests for `kvrouter render`.
type renderer struct {
	chat   *chat.Template
	tok    *tokenizer.Tokenizer // nil without --tokens
	tokens bool
}

// renderChat is `kvrouter render` with its input as an argument: it renders
// the chat completions request on stdin (or, with --jsonl, one per line)
// with the model's chat template and writes the prompt as a JSON string, or
// its token ids with --tokens.
func renderChat(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var dir, templateFile string
	var r renderer
	var jsonl bool
	fs := newFlagSet("render", "--tokenizer DIR [--tokens] [--jsonl] < request.json", stderr)
	fs.StringVar(&dir, "tokenizer", "", "directory holding tokenizer_config.json (and chat_template.jinja, tokenizer.json)")
	fs.StringVar(&templateFile, "chat-template", "", "file with a chat template replacing the model's (vLLM's --chat-template)")
	fs.BoolVar(&r.tokens, "tokens", false, "print the token ids vLLM would hash instead of the prompt")
	fs.BoolVar(&jsonl, "jsonl", false, "read one request per line and write one result per line; failures give {\"error\": ...}")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if dir == "" {
		fmt.Fprintln(stderr, "kvrouter render: --tokenizer is required")
		fs.Usage()
		return errUsage
	}
	if err := r.load(dir, templateFile); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	w := bufio.NewWriter(stdout)
	var err error
	if jsonl {
		err = r.lines(stdin, w)
	} else {
		err = r.all(stdin, w)
	}
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	return w.Flush()
}

func (r *renderer) load(dir, templateFile string) error {
	override := ""
	if templateFile != "" {
		b, err := os.ReadFile(templateFile)
		if err != nil {
			return err
		}
		override = string(b)
	}
	var err error
	if r.chat, err = chat.Load(dir, override); err != nil {
		return err
	}
	if r.tokens {
		r.tok, err = tokenizer.Load(dir)
	}
	return err
}

func (r *renderer) all(stdin io.Reader, w *bufio.Writer) error {
	data, err := io.ReadAll(io.LimitReader(stdin, maxTokenizeInput+1))
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if len(data) > maxTokenizeInput {
		return fmt.Errorf("stdin: more than %d bytes", maxTokenizeInput)
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
	req, err := chat.ParseRequest(body)
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
