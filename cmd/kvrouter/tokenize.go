package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// maxTokenizeInput bounds what `kvrouter tokenize` reads: all of stdin, or
// one line with --jsonl.
const maxTokenizeInput = 64 << 20

func runTokenize(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return tokenizeText(args, os.Stdin, stdout, stderr)
}

// tokenizeText is `kvrouter tokenize` with its input as an argument: it
// encodes stdin (or, with --jsonl, every line holding a JSON string) and
// writes JSON arrays of token ids.
func tokenizeText(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var dir string
	var special, jsonl bool
	fs := newFlagSet("tokenize", "--tokenizer DIR [--add-special-tokens] [--jsonl] < text", stderr)
	fs.StringVar(&dir, "tokenizer", "", "directory holding tokenizer.json and tokenizer_config.json")
	fs.BoolVar(&special, "add-special-tokens", false, "add the model's special tokens (BOS/EOS) as vLLM does for completion prompts")
	fs.BoolVar(&jsonl, "jsonl", false, "read one JSON string per line and write one JSON id array per line")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if dir == "" {
		fmt.Fprintln(stderr, "kvrouter tokenize: --tokenizer is required")
		fs.Usage()
		return errUsage
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	w := bufio.NewWriter(stdout)
	if jsonl {
		err = tokenizeLines(tok, special, stdin, w)
	} else {
		err = tokenizeAll(tok, special, stdin, w)
	}
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	return w.Flush()
}

func tokenizeAll(tok *tokenizer.Tokenizer, special bool, stdin io.Reader, w *bufio.Writer) error {
	data, err := io.ReadAll(io.LimitReader(stdin, maxTokenizeInput+1))
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if len(data) > maxTokenizeInput {
		return fmt.Errorf("stdin: more than %d bytes", maxTokenizeInput)
	}
	return writeIDs(tok, special, string(data), w)
}

var errNotJSONString = errors.New("want a JSON string per line")

func tokenizeLines(tok *tokenizer.Tokenizer, special bool, stdin io.Reader, w *bufio.Writer) error {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), maxTokenizeInput)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var text string
		if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
			return fmt.Errorf("stdin line %d: %w: %w", line, errNotJSONString, err)
		}
		if err := writeIDs(tok, special, text, w); err != nil {
			return fmt.Errorf("stdin line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	return nil
}

// writeIDs writes the ids of text as one JSON array line.
func writeIDs(tok *tokenizer.Tokenizer, special bool, text string, w *bufio.Writer) error {
	ids, err := tok.Encode(text, special)
	if err != nil {
		return err
	}
	out := make([]byte, 0, 8*len(ids)+3)
	out = append(out, '[')
	for i, id := range ids {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(id), 10)
	}
	_, err = w.Write(append(out, ']', '\n'))
	return err
}
