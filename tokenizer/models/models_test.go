package models

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/kvrouter/kvrouter/tokenizer"
)

func TestParse(t *testing.T) {
	for spec, want := range map[string]Model{
		"/models/q":       {Dir: "/models/q"},
		"hub:Org/Repo@v2": {Repo: "Org/Repo", Revision: "v2"},
		"hub:Org/Repo":    {Repo: "Org/Repo"},
		"alias:other":     {Alias: "other"},
	} {
		if got := Parse(spec); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", spec, got, want)
		}
	}
}

func TestModelYAML(t *testing.T) {
	var s Settings
	if err := yaml.Unmarshal([]byte("models: {a: /dir, b: {repo: Org/B, revision: main}}"), &s); err != nil {
		t.Fatal(err)
	}
	if s.Models["a"] != (Model{Dir: "/dir"}) || s.Models["b"] != (Model{Repo: "Org/B", Revision: "main"}) {
		t.Errorf("models = %+v", s.Models)
	}
	if err := yaml.Unmarshal([]byte("models: {a: {folder: x}}"), &s); err == nil || !strings.Contains(err.Error(), "folder: unknown field, want one of dir, repo") {
		t.Errorf("an unknown key: %v", err)
	}
}

// TestResolve: every problem at once, each under its key in the section.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := Default()
	s.HFCache = dir
	s.Models = map[string]Model{
		"good":   {Dir: dir, ChatTemplate: "{{ messages }}", ContentFormat: "openai"},
		"two":    {Dir: dir, Repo: "Org/Two"},
		"file":   {Dir: file},
		"rev":    {Alias: "good", Revision: "v1"},
		"alias":  {Alias: "good", ChatTemplate: "x"},
		"format": {Repo: "Org/F", ContentFormat: "html"},
	}
	s.Hub.Timeout, s.PrefixCacheBytes = 0, -1
	_, _, err := s.Resolve("")
	for _, want := range []string{
		`models.two: dir "` + dir + `", repo "Org/Two", alias "": want one of them`,
		"models.file: " + file + " is not a directory",
		`models.rev.revision: "v1" without repo`,
		"models.alias: an alias uses the template of good",
		`models.format.chat_template_content_format: "html", want auto, string or openai`,
		"hub.timeout: 0s, want > 0",
		"prefix_cache_bytes: -1, want >= 0",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve() = %v, want a problem %q", err, want)
		}
	}
	s = Default()
	s.HFCache = dir
	s.Models = map[string]Model{"good": {Dir: dir, ChatTemplate: "{{ messages }}", ContentFormat: "openai"}, "b": {Repo: "Org/B"}, "c": {Alias: "good"}}
	cfg, chats, err := s.Resolve("tok")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Models["good"] != dir || cfg.Repos["b"] != (tokenizer.Repo{ID: "Org/B"}) || cfg.Aliases["c"] != "good" || cfg.HubToken != "tok" || cfg.HubURL != tokenizer.DefaultHubURL {
		t.Errorf("config = %+v", cfg)
	}
	if o := chats["good"]; o.Template != "{{ messages }}" || o.Source != "tokenizers.models.good.chat_template (inline)" {
		t.Errorf("chat options = %+v", o)
	}
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{"HF_ENDPOINT": "http://mirror", "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": "/xdg", "HF_TOKEN": "t"}
	s := Default()
	token := s.ApplyEnv(func(k string) string { return env[k] }, func(key string) bool { return key == "hub.offline" })
	if s.Hub.Endpoint != "http://mirror" || s.Hub.Offline || s.HFCache != "/xdg/huggingface/hub" || token != "t" {
		t.Errorf("after ApplyEnv: %+v, token %q; want the endpoint, offline as the config said, the XDG cache", s, token)
	}
}

func TestApplyFlags(t *testing.T) {
	s := Settings{Models: map[string]Model{"file": {Dir: "/f"}}}
	errs := s.ApplyFlags([]string{"a=/a", "b=hub:Org/B@v1", "bad"}, []string{"a=t.jinja", "=x"}, []string{"b=openai"})
	if s.Models["file"] != (Model{}) || s.Models["a"] != (Model{Dir: "/a", ChatTemplate: "t.jinja"}) || s.Models["b"] != (Model{Repo: "Org/B", Revision: "v1", ContentFormat: "openai"}) {
		t.Errorf("models = %+v, want the flags' in place of the file's", s.Models)
	}
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), "--model: model \"bad\"") || !strings.HasPrefix(errs[1].Error(), "--chat-template: \"=x\"") {
		t.Errorf("problems = %v, want --model's and --chat-template's", errs)
	}
	s = Settings{Models: map[string]Model{"file": {Dir: "/f"}}}
	if errs := s.ApplyFlags(nil, []string{"file=t"}, nil); errs != nil || s.Models["file"] != (Model{Dir: "/f", ChatTemplate: "t"}) {
		t.Errorf("no --model: %+v, %v; want the file's model given the template", s.Models, errs)
	}
}

func TestModesAndRender(t *testing.T) {
	if m := Parse("render:http://render:8000"); m.Render != "http://render:8000" || m.Dir != "" {
		t.Errorf("Parse(render:URL) = %+v", m)
	}
	s := Default()
	s.HFCache = t.TempDir()
	s.Models = map[string]Model{
		"mistral": {Render: "http://render:8000"},
		"kimi":    {Repo: "org/kimi", Render: "pods", Mode: "render"},
		"plain":   {Repo: "org/plain"},
		"off":     {Mode: "load"},
	}
	if _, _, err := s.Resolve(""); err != nil {
		t.Fatal(err)
	}
	want := map[string]ModeSpec{
		"mistral": {Render: "http://render:8000", RenderOnly: true},
		"kimi":    {Mode: "render", Render: "pods"},
		"off":     {Mode: "load"},
	}
	if got := s.Modes(); !maps.Equal(got, want) {
		t.Errorf("Modes() = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		m    Model
		want string
	}{
		{Model{Mode: "fast"}, `models.x.mode: "fast", want auto, exact, render or load`},
		{Model{Render: "render:8000"}, `models.x.render: "render:8000", want pods or a base URL`},
		{Model{Render: "http://render:8000/v1"}, `models.x.render: "http://render:8000/v1", want pods or a base URL`},
	} {
		s.Models = map[string]Model{"x": tt.m}
		if _, _, err := s.Resolve(""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%+v) = %v, want %q", tt.m, err, tt.want)
		}
	}
}
