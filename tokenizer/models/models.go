// Package models reads the tokenizers section of kvrouter's config: where
// each model's tokenizer and chat template come from (a directory, a hub
// repository, another model's), and the hub that tokenizers missing from
// the cache are downloaded from. Resolve turns it into the tokenizer
// registry's configuration and each model's chat options.
package models

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// Settings is the tokenizers section.
type Settings struct {
	// Models gives models their tokenizer and chat settings; a model not
	// named here is looked up in hf_cache (and downloaded from the hub) as
	// the repository of its own name.
	Models  map[string]Model `yaml:"models"`
	HFCache string           `yaml:"hf_cache"`
	Hub     Hub              `yaml:"hub"`
	// PrefixCacheBytes is each loaded model's prefix cache budget; 0: off.
	PrefixCacheBytes int64 `yaml:"prefix_cache_bytes"`
	// MaxTokenizeBytes: a request body larger than this is routed by load
	// without tokenizing (the router's Config.MaxTokenizeBytes); 0: no
	// bound but the body's.
	MaxTokenizeBytes int `yaml:"max_tokenize_bytes"`
}

// Model is one model's tokenizer and chat settings. In YAML a bare string
// is a tokenizer directory.
type Model struct {
	// Dir, Repo or Alias: where the tokenizer is, at most one of them (none:
	// the repository of the model's own name).
	Dir      string `yaml:"dir"`      // a directory holding tokenizer.json
	Repo     string `yaml:"repo"`     // a hub repository, ORG/NAME
	Revision string `yaml:"revision"` // Repo's branch, tag or commit; default main
	Alias    string `yaml:"alias"`    // the model whose tokenizer and template this one uses
	// ChatTemplate replaces the model's chat template, as the pods'
	// --chat-template: a file, the template's text, or the name of one of
	// the model's named templates.
	ChatTemplate string `yaml:"chat_template"`
	// ContentFormat is the pods' --chat-template-content-format: auto,
	// string or openai.
	ContentFormat string `yaml:"chat_template_content_format"`
	// Mode is how the model's prompts become token ids: auto (default),
	// exact (kvrouter's tokenizer and template), render (vLLM's render
	// endpoints) or load (none: routed by load).
	Mode string `yaml:"mode"`
	// Render is the model's render endpoint: an http(s) base URL (vllm
	// launch render), or "pods" for the model's own pods; "": none.
	Render string `yaml:"render"`
}

// ModeSpec is a model's mode and render endpoint, for the router; a
// model with a render endpoint and no tokenizer source is render-only.
type ModeSpec struct {
	Mode, Render string
	RenderOnly   bool
}

// Modes returns each model's ModeSpec that is not the default (auto, no
// render endpoint).
func (s Settings) Modes() map[string]ModeSpec {
	out := map[string]ModeSpec{}
	for name, m := range s.Models {
		if m.Mode == "" && m.Render == "" {
			continue
		}
		out[name] = ModeSpec{Mode: m.Mode, Render: m.Render, RenderOnly: m.Render != "" && m.Dir == "" && m.Repo == "" && m.Alias == ""}
	}
	return out
}

// Hub is where tokenizers missing from hf_cache are downloaded from.
type Hub struct {
	// Endpoint is the hub or a mirror; HF_ENDPOINT when the config does not
	// give one (ApplyEnv).
	Endpoint string `yaml:"endpoint"`
	// TokenEnv names the environment variable holding the token.
	TokenEnv string `yaml:"token_env"`
	// TokenFile holds the token instead (a mounted Secret), read at each
	// download.
	TokenFile string        `yaml:"token_file"`
	Timeout   time.Duration `yaml:"timeout"` // the download of one file
	// Offline: no downloads, only models and hf_cache; HF_HUB_OFFLINE=1
	// when the config does not say (ApplyEnv).
	Offline bool `yaml:"offline"`
}

// Default is the section's defaults: the hub, its token in HF_TOKEN, the
// tokenizer package's timeout and prefix cache budget.
func Default() Settings {
	return Settings{
		PrefixCacheBytes: tokenizer.DefaultPrefixCacheBytes,
		Hub:              Hub{Endpoint: tokenizer.DefaultHubURL, TokenEnv: "HF_TOKEN", Timeout: tokenizer.DefaultConfig().HubTimeout},
	}
}

// modelFields are Model's YAML keys.
var modelFields = []string{"dir", "repo", "revision", "alias", "chat_template", "chat_template_content_format", "mode", "render"}

// UnmarshalYAML reads a bare directory or a mapping of Model's keys.
func (m *Model) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		*m = Model{Dir: n.Value}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("want a tokenizer directory or a mapping of %s", strings.Join(modelFields, ", "))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(modelFields, k) {
			return fmt.Errorf("%s: unknown field, want one of %s", k, strings.Join(modelFields, ", "))
		}
	}
	type plain Model
	return n.Decode((*plain)(m))
}

// Parse reads a --model value: DIR, hub:ORG/REPO[@REVISION],
// alias:MODEL or render:URL (render:pods for the model's own pods).
func Parse(spec string) Model {
	if u, ok := strings.CutPrefix(spec, "render:"); ok {
		return Model{Render: u}
	}
	if repo, ok := strings.CutPrefix(spec, "hub:"); ok {
		id, rev, _ := strings.Cut(repo, "@")
		return Model{Repo: id, Revision: rev}
	}
	if target, ok := strings.CutPrefix(spec, "alias:"); ok {
		return Model{Alias: target}
	}
	return Model{Dir: spec}
}

// ApplyFlags sets the models from repeated flags: each --model NAME=SPEC
// (SPEC as Parse reads it) replaces the file's models when any is given;
// each --chat-template and --chat-template-content-format NAME=VALUE sets
// that field of the model's entry. It returns a problem per value of no
// such form, each naming its flag.
func (s *Settings) ApplyFlags(model, template, format []string) []error {
	var errs []error
	if model != nil {
		s.Models = map[string]Model{}
		for _, f := range model {
			name, spec, ok := strings.Cut(f, "=")
			if !ok || name == "" || spec == "" {
				errs = append(errs, fmt.Errorf("--model: model %q: want NAME=DIR, NAME=hub:ORG/REPO[@REVISION], NAME=alias:MODEL or NAME=render:URL", f))
				continue
			}
			s.Models[name] = Parse(spec)
		}
	}
	for _, fl := range []struct {
		flag   string
		values []string
		set    func(*Model, string)
	}{
		{"--chat-template", template, func(m *Model, v string) { m.ChatTemplate = v }},
		{"--chat-template-content-format", format, func(m *Model, v string) { m.ContentFormat = v }},
	} {
		for _, f := range fl.values {
			name, v, ok := strings.Cut(f, "=")
			if !ok || name == "" || v == "" {
				errs = append(errs, fmt.Errorf("%s: %q: want NAME=VALUE", fl.flag, f))
				continue
			}
			if s.Models == nil {
				s.Models = map[string]Model{}
			}
			m := s.Models[name]
			fl.set(&m, v)
			s.Models[name] = m
		}
	}
	return errs
}

// ApplyEnv reads what the hub's own client reads from the environment: the
// endpoint (HF_ENDPOINT) and offline mode (HF_HUB_OFFLINE) when the config
// does not set them (given says which keys it set: "hub.endpoint",
// "hub.offline"), the cache directory when none is given (HF_HUB_CACHE,
// HF_HOME/hub, then the user cache directory's huggingface/hub). It
// returns the token held by the variable hub.token_env names.
func (s *Settings) ApplyEnv(getenv func(string) string, given func(key string) bool) (token string) {
	h := &s.Hub
	if v := getenv("HF_ENDPOINT"); v != "" && !given("hub.endpoint") {
		h.Endpoint = v
	}
	if v := strings.ToLower(getenv("HF_HUB_OFFLINE")); !given("hub.offline") && (v == "1" || v == "true" || v == "yes" || v == "on") {
		h.Offline = true
	}
	if s.HFCache == "" {
		switch {
		case getenv("HF_HUB_CACHE") != "":
			s.HFCache = getenv("HF_HUB_CACHE")
		case getenv("HF_HOME") != "":
			s.HFCache = filepath.Join(getenv("HF_HOME"), "hub")
		case getenv("XDG_CACHE_HOME") != "":
			s.HFCache = filepath.Join(getenv("XDG_CACHE_HOME"), "huggingface", "hub")
		case getenv("HOME") != "":
			s.HFCache = filepath.Join(getenv("HOME"), ".cache", "huggingface", "hub")
		}
	}
	if h.TokenEnv != "" {
		return getenv(h.TokenEnv)
	}
	return ""
}

// Resolve checks s, every problem at once, each starting with its key
// ("models.NAME.chat_template: ..."), and returns the tokenizer registry's
// configuration, with hubToken, and each model's chat options. A template
// file that cannot be read or parsed is a problem here; a template named
// among the model's own is checked when its files load.
func (s Settings) Resolve(hubToken string) (tokenizer.Config, map[string]chat.Options, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	cfg := tokenizer.DefaultConfig()
	cfg.HFCache, cfg.PrefixCacheBytes = s.HFCache, s.PrefixCacheBytes
	cfg.Models, cfg.Repos, cfg.Aliases = map[string]string{}, map[string]tokenizer.Repo{}, map[string]string{}
	chats := map[string]chat.Options{}
	for _, name := range slices.Sorted(maps.Keys(s.Models)) {
		m, key := s.Models[name], "models."+name
		if err := m.source(name, &cfg); err != nil {
			errs = append(errs, err)
		}
		if err := m.checkMode(key); err != nil {
			errs = append(errs, err)
		}
		if m.ChatTemplate == "" && m.ContentFormat == "" {
			continue
		}
		if m.Alias != "" {
			bad("%s: an alias uses the template of %s: give chat_template and chat_template_content_format there", key, m.Alias)
			continue
		}
		opt, err := TemplateOptions("tokenizers."+key+".chat_template", m.ChatTemplate)
		if err != nil {
			bad("%s.chat_template: %w", key, err)
		}
		if opt.ContentFormat, err = chat.ParseContentFormat(m.ContentFormat); err != nil {
			bad("%s.chat_template_content_format: %q, want auto, string or openai", key, m.ContentFormat)
		}
		chats[name] = opt
	}
	errs = append(errs, s.Hub.resolve(hubToken, &cfg)...)
	if s.PrefixCacheBytes < 0 {
		bad("prefix_cache_bytes: %d, want >= 0", s.PrefixCacheBytes)
	}
	if err := cfg.Validate(); len(errs) == 0 && err != nil { // what the registry refuses beyond the above: a bad repository name, an alias loop
		bad("models: %w", err)
	}
	return cfg, chats, errors.Join(errs...)
}

// checkMode checks the model's mode and render endpoint.
func (m Model) checkMode(key string) error {
	switch m.Mode {
	case "", "auto", "exact", "render", "load":
	default:
		return fmt.Errorf("%s.mode: %q, want auto, exact, render or load", key, m.Mode)
	}
	if m.Render == "" || m.Render == "pods" {
		return nil
	}
	if u, err := url.Parse(m.Render); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%s.render: %q, want pods or a base URL such as http://vllm-render:8000", key, m.Render)
	}
	return nil
}

// source checks where a model's tokenizer comes from and puts it in cfg.
func (m Model) source(name string, cfg *tokenizer.Config) error {
	key := "models." + name
	set := 0
	for _, v := range []string{m.Dir, m.Repo, m.Alias} {
		if v != "" {
			set++
		}
	}
	switch {
	case name == "":
		return errors.New("models: a model without a name")
	case set > 1:
		return fmt.Errorf("%s: dir %q, repo %q, alias %q: want one of them", key, m.Dir, m.Repo, m.Alias)
	case m.Revision != "" && m.Repo == "":
		return fmt.Errorf("%s.revision: %q without repo", key, m.Revision)
	case m.Dir != "":
		cfg.Models[name] = m.Dir
		if fi, err := os.Stat(m.Dir); err != nil { // the files load, or fail the start, when the app is built
			return fmt.Errorf("%s: %w", key, err)
		} else if !fi.IsDir() {
			return fmt.Errorf("%s: %s is not a directory", key, m.Dir)
		}
	case m.Alias != "":
		cfg.Aliases[name] = m.Alias
	case m.Repo != "":
		cfg.Repos[name] = tokenizer.Repo{ID: m.Repo, Revision: m.Revision}
	}
	return nil
}

// resolve checks the hub section and puts it in cfg.
func (h Hub) resolve(token string, cfg *tokenizer.Config) []error {
	var errs []error
	cfg.HubToken, cfg.HubTokenFile, cfg.HubTimeout, cfg.Offline = token, h.TokenFile, h.Timeout, h.Offline
	if h.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("hub.timeout: %v, want > 0", h.Timeout))
	}
	if h.TokenFile != "" {
		if _, err := os.ReadFile(h.TokenFile); err != nil {
			errs = append(errs, fmt.Errorf("hub.token_file: %w", err))
		}
	}
	if h.Offline {
		return errs
	}
	if u, err := url.Parse(h.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return append(errs, fmt.Errorf("hub.endpoint: %q, want an http(s) URL (or hub.offline)", h.Endpoint))
	}
	if cfg.HFCache != "" { // none (no HOME either): nothing to download into
		cfg.HubURL = h.Endpoint
	}
	return errs
}

// TemplateOptions reads a configured chat template as vLLM's
// --chat-template does: a file when one is at that path, else the
// template's text when it has a brace or a newline; else a name among the
// model's named templates, unless it looks like a path. setting names
// where it was configured, for the template's Source.
func TemplateOptions(setting, v string) (chat.Options, error) {
	if v == "" {
		return chat.Options{}, nil
	}
	src, source := v, setting+" (inline)"
	if b, err := os.ReadFile(v); err == nil {
		src, source = string(b), setting+" ("+v+")"
	} else if !strings.ContainsAny(v, "{}\n") {
		if strings.ContainsAny(v, `/\`) || strings.HasSuffix(v, ".jinja") {
			return chat.Options{}, fmt.Errorf("%q looks like a file but cannot be read: %w", v, err)
		}
		return chat.Options{Named: v, Source: setting + " (named " + v + ")"}, nil
	}
	if _, err := jinja.Compile(src); err != nil {
		return chat.Options{}, fmt.Errorf("%s: %w", strings.TrimPrefix(source, setting+" "), err)
	}
	return chat.Options{Template: src, Source: source}, nil
}
