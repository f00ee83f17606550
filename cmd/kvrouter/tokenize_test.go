package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTinyTokenizer writes a byte-level tokenizer: byte b has id b, "he" is
// 256, "ll" 257, and the special token <|end|> 258 starts every sequence
// with add_special_tokens.
func writeTinyTokenizer(t *testing.T) string {
	t.Helper()
	vocab := map[string]int{"he": 256, "ll": 257}
	next := 256
	for b := range 256 {
		r := rune(b)
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE
		if !printable {
			r = rune(next)
			next++
		}
		vocab[string(r)] = b
	}
	file := map[string]any{
		"added_tokens":  []any{map[string]any{"id": 258, "content": "<|end|>", "special": true}},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		"post_processor": map[string]any{
			"type":           "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|end|>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
			"special_tokens": map[string]any{"<|end|>": map[string]any{"ids": []int{258}}},
		},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": [][]string{{"h", "e"}, {"l", "l"}}},
	}
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTokenize(t *testing.T) {
	dir := writeTinyTokenizer(t)
	tests := []struct {
		name       string
		args       []string
		stdin      string
		want       string
		wantErr    error
		wantMsg    string // in the error
		wantStderr string
	}{
		{name: "text", args: []string{"--tokenizer", dir}, stdin: "hello", want: "[256,257,111]\n"},
		{name: "special", args: []string{"--tokenizer", dir, "--add-special-tokens"}, stdin: "hello", want: "[258,256,257,111]\n"},
		{name: "special token in text", args: []string{"--tokenizer", dir}, stdin: "he<|end|>", want: "[256,258]\n"},
		{name: "empty", args: []string{"--tokenizer", dir}, stdin: "", want: "[]\n"},
		{name: "jsonl", args: []string{"--tokenizer", dir, "--jsonl"}, stdin: "\"hello\"\n\n\"<|end|>he\\n\"\n", want: "[256,257,111]\n[258,256,10]\n"},
		{name: "jsonl not a string", args: []string{"--tokenizer", dir, "--jsonl"}, stdin: "[1]\n", wantErr: errNotJSONString},
		{name: "final newline kept and said", args: []string{"--tokenizer", dir}, stdin: "hello\n", want: "[256,257,111,10]\n", wantStderr: "kvrouter: tokenize: the text ends with a newline, which is tokenized (--strip-newline drops it)"},
		{name: "strip newline", args: []string{"--tokenizer", dir, "--strip-newline"}, stdin: "hello\n", want: "[256,257,111]\n"},
		{name: "strip CRLF", args: []string{"--tokenizer", dir, "--strip-newline"}, stdin: "hello\r\n", want: "[256,257,111]\n"},
		{name: "strip one newline only", args: []string{"--tokenizer", dir, "--strip-newline"}, stdin: "he\n\n", want: "[256,10]\n"},
		{name: "no tokenizer", args: nil, wantErr: errUsage, wantStderr: `kvrouter: required flag(s) "tokenizer" not set`},
		{name: "stray argument", args: []string{"--tokenizer", dir, "x"}, wantErr: errUsage},
		{name: "missing dir", args: []string{"--tokenizer", filepath.Join(dir, "nope")}, wantErr: os.ErrNotExist, wantMsg: "--tokenizer " + filepath.Join(dir, "nope") + ": no such directory"},
		{name: "not a dir", args: []string{"--tokenizer", filepath.Join(dir, "tokenizer.json")}, wantErr: errAny, wantMsg: "tokenizer.json: not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runWith(t.Context(), append([]string{"tokenize"}, tt.args...), streams{strings.NewReader(tt.stdin), &stdout, &stderr})
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(tt.wantErr, errAny) && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("tokenize(%q) = %v, want %v (stderr %q)", tt.args, err, tt.wantErr, stderr.String())
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("tokenize(%q) = %v, want it to say %q", tt.args, err, tt.wantMsg)
			}
			if tt.wantErr == nil && stdout.String() != tt.want {
				t.Errorf("tokenize(%q) stdout = %q, want %q", tt.args, stdout.String(), tt.want)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("tokenize(%q) stderr = %q, want it to contain %q", tt.args, stderr.String(), tt.wantStderr)
			}
		})
	}
}
