package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeChatTokenizer adds a tokenizer_config.json with a small chat
// template to the tiny tokenizer.
func writeChatTokenizer(t *testing.T) string {
	t.Helper()
	dir := writeTinyTokenizer(t)
	cfg := `{"chat_template": "{% for m in messages %}<|end|>{{ m.role }}:{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}he{% endif %}", "eos_token": "<|end|>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRender(t *testing.T) {
	dir := writeChatTokenizer(t)
	tmpl := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(tmpl, []byte("[{{ messages|length }}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	user := `{"messages": [{"role": "user", "content": "hello"}]}`
	tests := []struct {
		name       string
		args       []string
		stdin      string
		want       string
		wantErr    error
		wantStderr string
	}{
		{name: "prompt", args: []string{"--tokenizer", dir}, stdin: user, want: "\"<|end|>user:hello\\nhe\"\n"},
		{name: "tokens", args: []string{"--tokenizer", dir, "--tokens"}, stdin: `{"messages": [{"role": "u", "content": "hello"}], "add_generation_prompt": false}`, want: "[258,117,58,256,257,111,10]\n"},
		{name: "tokens with special", args: []string{"--tokenizer", dir, "--tokens"}, stdin: `{"messages": [], "add_special_tokens": true}`, want: "[258,256]\n"},
		{name: "override template", args: []string{"--tokenizer", dir, "--chat-template", tmpl}, stdin: user, want: "\"[1]\"\n"},
		{name: "inline template", args: []string{"--tokenizer", dir, "--chat-template", "<{{ messages[0].content }}>"}, stdin: user, want: "\"<hello>\"\n"},
		{name: "openai content", args: []string{"--tokenizer", dir, "--chat-template", "{{ messages[0].content[0].text }}", "--chat-template-content-format", "openai"}, stdin: user, want: "\"hello\"\n"},
		{name: "string content", args: []string{"--tokenizer", dir, "--chat-template", "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}", "--chat-template-content-format", "string"}, stdin: user, want: "\"\"\n"},
		{name: "auto content", args: []string{"--tokenizer", dir, "--chat-template", "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"}, stdin: user, want: "\"hello\"\n"},
		{name: "bad content format", args: []string{"--tokenizer", dir, "--chat-template-content-format", "html"}, stdin: user, wantErr: errAny},
		{
			name: "jsonl", args: []string{"--tokenizer", dir, "--jsonl"},
			stdin: user + "\n\n{\"messages\": 1}\n" + `{"messages": [], "add_generation_prompt": false}` + "\n",
			want:  "\"<|end|>user:hello\\nhe\"\n{\"error\":\"tokenizer: chat request: messages must be a list\"}\n\"\"\n",
		},
		{
			name: "anthropic messages", args: []string{"--tokenizer", dir, "--api", "messages"},
			stdin: `{"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}`,
			want:  "\"<|end|>system:bebrief\\n<|end|>user:hello\\nhe\"\n",
		},
		{name: "responses", args: []string{"--tokenizer", dir, "--api", "responses"}, stdin: `{"instructions": "be", "input": "hello"}`, want: "\"<|end|>system:be\\n<|end|>user:hello\\nhe\"\n"},
		{name: "refused messages", args: []string{"--tokenizer", dir, "--api", "messages"}, stdin: `{"model": "m", "messages": []}`, wantErr: errAny},
		{name: "bad api", args: []string{"--tokenizer", dir, "--api", "grpc"}, stdin: user, wantErr: errAny},
		{name: "bad request", args: []string{"--tokenizer", dir}, stdin: `{`, wantErr: errAny},
		{name: "no tokenizer", args: nil, wantErr: errUsage, wantStderr: `kvrouter: required flag(s) "tokenizer" not set`},
		{name: "missing dir", args: []string{"--tokenizer", "/nope"}, wantErr: os.ErrNotExist, wantStderr: ""},
		{name: "stray argument", args: []string{"--tokenizer", dir, "x"}, wantErr: errUsage},
		{name: "missing template file", args: []string{"--tokenizer", dir, "--chat-template", filepath.Join(dir, "nope")}, wantErr: os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runWith(t.Context(), append([]string{"render"}, tt.args...), streams{strings.NewReader(tt.stdin), &stdout, &stderr})
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(tt.wantErr, errAny) && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("render(%q) = %v, want %v (stderr %q)", tt.args, err, tt.wantErr, stderr.String())
			}
			if tt.name == "missing dir" && err.Error() != "render: --tokenizer /nope: no such directory" {
				t.Errorf("render(%q) = %q, want it to say the directory is missing", tt.args, err)
			}
			if tt.wantErr == nil && stdout.String() != tt.want {
				t.Errorf("render(%q) stdout = %q, want %q", tt.args, stdout.String(), tt.want)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("render(%q) stderr = %q, want it to contain %q", tt.args, stderr.String(), tt.wantStderr)
			}
		})
	}
}

// errAny stands for any error in the table above.
var errAny = errors.New("any error")
