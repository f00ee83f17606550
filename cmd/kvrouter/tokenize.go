package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// maxTokenizeInput bounds what `kvrouter tokenize` reads: all of stdin, or
// one line with --jsonl.
const maxTokenizeInput = 64 << 20

func newTokenizeCommand(s streams) *cobra.Command {
	var o tokenizeOptions
	cmd := &cobra.Command{
		Use:   "tokenize",
		Short: "Print the token ids of text read on stdin",
		Long: `Print the token ids the model's tokenizer gives the text read on stdin, as
vLLM sees a completion prompt. All of stdin is the text, a final newline
included (echo adds one): --strip-newline drops it, and without the flag a
final newline is said on stderr. With --jsonl each line is a JSON string.`,
		Example: `  printf 'Hello world' | kvrouter tokenize --tokenizer /models/qwen
  echo 'Hello world' | kvrouter tokenize --tokenizer /models/qwen --strip-newline`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.dir, "tokenizer", "", "directory holding tokenizer.json and tokenizer_config.json")
	fs.BoolVar(&o.special, "add-special-tokens", false, "add the model's special tokens (BOS/EOS) as vLLM does for completion prompts")
	fs.BoolVar(&o.stripNewline, "strip-newline", false, "drop one newline (\\n or \\r\\n) at the end of stdin, as echo adds")
	fs.BoolVar(&o.jsonl, "jsonl", false, "read one JSON string per line and write one JSON id array per line")
	_ = cmd.MarkFlagRequired("tokenizer")
	_ = cmd.MarkFlagDirname("tokenizer")
	cmd.RunE = runE(func(cmd *cobra.Command) error { return o.run(cmd.InOrStdin(), s.out, s.errOut) })
	return cmd
}

type tokenizeOptions struct {
	dir                          string
	special, stripNewline, jsonl bool
}

// run encodes stdin (or, with --jsonl, every line holding a JSON string)
// and writes JSON arrays of token ids.
func (o tokenizeOptions) run(stdin io.Reader, stdout, stderr io.Writer) error {
	if err := checkDir("tokenizer", o.dir); err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	tok, err := tokenizer.Load(o.dir)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	w := bufio.NewWriter(stdout)
	if o.jsonl {
		err = tokenizeLines(tok, o.special, stdin, w)
	} else {
		err = o.tokenizeAll(tok, stdin, w, stderr)
	}
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	return w.Flush()
}

func (o tokenizeOptions) tokenizeAll(tok *tokenizer.Tokenizer, stdin io.Reader, w *bufio.Writer, stderr io.Writer) error {
	data, err := readInput(stdin)
	if err != nil {
		return err
	}
	text := string(data)
	if o.stripNewline {
		text = strings.TrimSuffix(strings.TrimSuffix(text, "\n"), "\r")
	} else if strings.HasSuffix(text, "\n") {
		fmt.Fprintln(stderr, "kvrouter: tokenize: the text ends with a newline, which is tokenized (--strip-newline drops it)")
	}
	return writeIDs(tok, o.special, text, w)
}

// readInput reads all of stdin, at most maxTokenizeInput bytes.
func readInput(stdin io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(stdin, maxTokenizeInput+1))
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if len(data) > maxTokenizeInput {
		return nil, fmt.Errorf("stdin: more than %d bytes", maxTokenizeInput)
	}
	return data, nil
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
