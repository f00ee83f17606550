package main

import (
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

// tokenizersConfig is where each model's tokenizer and chat template come
// from.
type tokenizersConfig struct {
	// Models gives models their tokenizer and chat settings; a model not
	// named here is looked up in hf_cache (and downloaded from the hub) as
	// the repository of its own name.
	Models  map[string]modelEntry `yaml:"models"`   // --model, --chat-template, --chat-template-content-format
	HFCache string                `yaml:"hf_cache"` // --hf-cache
	Hub     hubConfig             `yaml:"hub"`
	// PrefixCacheBytes is each loaded model's prefix cache budget; 0: off.
	PrefixCacheBytes int64 `yaml:"prefix_cache_bytes"`
	// MaxTokenizeBytes: a request body larger than this is routed by load
	// without tokenizing (router.Config.MaxTokenizeBytes); 0: no bound
	// but extproc.max_body_bytes.
	MaxTokenizeBytes int `yaml:"max_tokenize_bytes"`
}

// modelEntry is one model's tokenizer and chat settings. In YAML a bare
// string is a tokenizer directory.
type modelEntry struct {
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
}

// modelEntryFields are modelEntry's YAML keys.
var modelEntryFields = []string{"dir", "repo", "revision", "alias", "chat_template", "chat_template_content_format"}

// UnmarshalYAML reads a bare directory or a mapping of modelEntry's keys.
func (m *modelEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		*m = modelEntry{Dir: n.Value}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("want a tokenizer directory or a mapping of %s", strings.Join(modelEntryFields, ", "))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(modelEntryFields, k) {
			return fmt.Errorf("%s: unknown field, want one of %s", k, strings.Join(modelEntryFields, ", "))
		}
	}
	type plain modelEntry
	return n.Decode((*plain)(m))
}

// hubConfig is where tokenizers missing from hf_cache are downloaded from.
type hubConfig struct {
	// Endpoint is the hub or a mirror; HF_ENDPOINT when neither the file
	// nor the flag gives one.
	Endpoint string `yaml:"endpoint"` // --hub-endpoint
	// TokenEnv names the environment variable holding the token.
	TokenEnv string `yaml:"token_env"` // --hub-token-env
	// TokenFile holds the token instead (a mounted Secret), read at each
	// download.
	TokenFile string        `yaml:"token_file"` // --hub-token-file
	Timeout   time.Duration `yaml:"timeout"`    // --hub-timeout: the download of one file
	// Offline: no downloads, only models and hf_cache; HF_HUB_OFFLINE=1
	// when neither the file nor the flag says.
	Offline bool `yaml:"offline"` // --hub-offline
}

// hubDefaults is the hub section's defaults.
func hubDefaults() hubConfig {
	return hubConfig{Endpoint: tokenizer.DefaultHubURL, TokenEnv: "HF_TOKEN", Timeout: tokenizer.DefaultConfig().HubTimeout}
}

// given reports whether the config file or a flag on the command line set
// the field at path.
func (c config) given(path string) bool {
	if _, ok := c.positions[path]; ok {
		return true
	}
	return slices.ContainsFunc(c.flagsSet, func(flag string) bool { return flagPath(flag) == path })
}

// applyEnv reads what the hub's own client reads from the environment: the
// endpoint (HF_ENDPOINT) and offline mode (HF_HUB_OFFLINE) when neither the
// file nor a flag sets them, the cache directory when none is given
// (HF_HUB_CACHE, HF_HOME/hub, then the user cache directory's
// huggingface/hub), and the token from the variable hub.token_env names.
func (c *config) applyEnv(getenv func(string) string) {
	h := &c.Tokenizers.Hub
	if v := getenv("HF_ENDPOINT"); v != "" && !c.given("tokenizers.hub.endpoint") {
		h.Endpoint = v
	}
	if v := strings.ToLower(getenv("HF_HUB_OFFLINE")); !c.given("tokenizers.hub.offline") && (v == "1" || v == "true" || v == "yes" || v == "on") {
		h.Offline = true
	}
	if c.Tokenizers.HFCache == "" {
		switch {
		case getenv("HF_HUB_CACHE") != "":
			c.Tokenizers.HFCache = getenv("HF_HUB_CACHE")
		case getenv("HF_HOME") != "":
			c.Tokenizers.HFCache = filepath.Join(getenv("HF_HOME"), "hub")
		case getenv("XDG_CACHE_HOME") != "":
			c.Tokenizers.HFCache = filepath.Join(getenv("XDG_CACHE_HOME"), "huggingface", "hub")
		case getenv("HOME") != "":
			c.Tokenizers.HFCache = filepath.Join(getenv("HOME"), ".cache", "huggingface", "hub")
		}
	}
	if h.TokenEnv != "" {
		c.hubToken = getenv(h.TokenEnv)
	}
}

// tokenizerSettings checks the tokenizers section and returns the
// tokenizer registry's configuration and each model's chat options. A
// template file that cannot be read or parsed is a problem here; a
// template named among the model's own is checked when its files load.
func (c config) tokenizerSettings(p *problems) (tokenizer.Config, map[string]chat.Options) {
	t := c.Tokenizers
	cfg := tokenizer.DefaultConfig()
	cfg.HFCache, cfg.PrefixCacheBytes = t.HFCache, t.PrefixCacheBytes
	cfg.Models, cfg.Repos, cfg.Aliases = map[string]string{}, map[string]tokenizer.Repo{}, map[string]string{}
	chats := map[string]chat.Options{}
	for _, name := range slices.Sorted(maps.Keys(t.Models)) {
		m, key := t.Models[name], "tokenizers.models."+name
		c.modelSource(p, name, m, &cfg)
		if m.ChatTemplate == "" && m.ContentFormat == "" {
			continue
		}
		if m.Alias != "" {
			p.add("%s: an alias uses the template of %s: give chat_template and chat_template_content_format there", key, m.Alias)
			continue
		}
		opt, err := templateOptions(key+".chat_template", m.ChatTemplate)
		if err != nil {
			p.add("%s: %v", c.modelSetting(name, "chat_template", "--chat-template", c.templateFlags), err)
		}
		if opt.ContentFormat, err = chat.ParseContentFormat(m.ContentFormat); err != nil {
			p.add("%s: %q, want auto, string or openai", c.modelSetting(name, "chat_template_content_format", "--chat-template-content-format", c.formatFlags), m.ContentFormat)
		}
		chats[name] = opt
	}
	c.hubSettings(p, &cfg)
	return cfg, chats
}

// modelSetting names where a field of a model's entry came from: the flag
// on the command line (flag NAME), or its path in the config file.
func (c config) modelSetting(name, field, flag string, flags []string) string {
	if slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, name+"=") }) {
		return flag + " " + name
	}
	return "tokenizers.models." + name + "." + field
}

// modelSource checks where a model's tokenizer comes from and puts it in
// cfg.
func (c config) modelSource(p *problems, name string, m modelEntry, cfg *tokenizer.Config) {
	key := "tokenizers.models." + name
	set := 0
	for _, v := range []string{m.Dir, m.Repo, m.Alias} {
		if v != "" {
			set++
		}
	}
	switch {
	case name == "":
		p.add("tokenizers.models: a model without a name")
	case set > 1:
		p.add("%s: dir %q, repo %q, alias %q: want one of them", key, m.Dir, m.Repo, m.Alias)
	case m.Revision != "" && m.Repo == "":
		p.add("%s.revision: %q without repo", key, m.Revision)
	case m.Dir != "":
		checkTokenizerDir(p, name, m.Dir)
		cfg.Models[name] = m.Dir
	case m.Alias != "":
		cfg.Aliases[name] = m.Alias
	case m.Repo != "":
		cfg.Repos[name] = tokenizer.Repo{ID: m.Repo, Revision: m.Revision}
	}
}

// hubSettings checks the hub section and puts it in cfg.
func (c config) hubSettings(p *problems, cfg *tokenizer.Config) {
	h := c.Tokenizers.Hub
	cfg.HubToken, cfg.HubTokenFile, cfg.HubTimeout, cfg.Offline = c.hubToken, h.TokenFile, time.Duration(h.Timeout), h.Offline
	if h.Timeout <= 0 {
		p.add("tokenizers.hub.timeout: %v, want > 0", time.Duration(h.Timeout))
	}
	if h.TokenFile != "" {
		if _, err := os.ReadFile(h.TokenFile); err != nil {
			p.add("tokenizers.hub.token_file: %v", err)
		}
	}
	if h.Offline {
		return
	}
	if u, err := url.Parse(h.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("tokenizers.hub.endpoint: %q, want an http(s) URL (or tokenizers.hub.offline)", h.Endpoint)
		return
	}
	if cfg.HFCache != "" { // none (no HOME either): nothing to download into
		cfg.HubURL = h.Endpoint
	}
}

// templateOptions reads a configured chat template as vLLM's
// --chat-template does: a file when one is at that path, else the
// template's text when it has a brace or a newline; else a name among the
// model's named templates, unless it looks like a path.
func templateOptions(setting, v string) (chat.Options, error) {
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

// modelSpec reads --model's value: DIR, hub:ORG/REPO[@REVISION] or
// alias:MODEL.
func modelSpec(spec string) modelEntry {
	if repo, ok := strings.CutPrefix(spec, "hub:"); ok {
		id, rev, _ := strings.Cut(repo, "@")
		return modelEntry{Repo: id, Revision: rev}
	}
	if target, ok := strings.CutPrefix(spec, "alias:"); ok {
		return modelEntry{Alias: target}
	}
	return modelEntry{Dir: spec}
}

// applyModelFlag sets a field of tokenizers.models from each NAME=VALUE of
// a repeated flag.
func (c *config) applyModelFlag(p *problems, flag string, values []string, set func(*modelEntry, string)) {
	for _, f := range values {
		name, v, ok := strings.Cut(f, "=")
		if !ok || name == "" || v == "" {
			p.add("%s: %q: want NAME=VALUE", flag, f)
			continue
		}
		if c.Tokenizers.Models == nil {
			c.Tokenizers.Models = map[string]modelEntry{}
		}
		m := c.Tokenizers.Models[name]
		set(&m, v)
		c.Tokenizers.Models[name] = m
	}
}
