package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestNewRefuses checks that settings which would change ids and are not
// implemented are refused at load time, with a message naming them.
func TestNewRefuses(t *testing.T) {
	split := func(extra map[string]any) map[string]any {
		s := map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Isolated"}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	tests := []struct {
		name   string
		patch  func(f map[string]any)
		config string
		want   string
	}{
		{"normalizer", func(f map[string]any) { f["normalizer"] = map[string]any{"type": "Lowercase"} }, "", `normalizer "Lowercase" not supported`},
		{"regex replace", func(f map[string]any) {
			f["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": "a"}, "content": "b"}
		}, "", "only string patterns"},
		{"pre-tokenizer", func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }, "", `pre_tokenizer "Whitespace" not supported`},
		{"invert", func(f map[string]any) { f["pre_tokenizer"] = split(map[string]any{"invert": true}) }, "", "invert not supported"},
		{"behavior", func(f map[string]any) { f["pre_tokenizer"] = split(map[string]any{"behavior": "Odd"}) }, "", `behavior "Odd"`},
		{"regex class", func(f map[string]any) {
			f["pre_tokenizer"] = split(map[string]any{"pattern": map[string]any{"Regex": `\d+`}})
		}, "", `\d at 0 not supported`},
		{"anchor", func(f map[string]any) {
			f["pre_tokenizer"] = split(map[string]any{"pattern": map[string]any{"Regex": `^\s+`}})
		}, "", "anchor ^ at 0"},
		{"split after bytelevel", func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "ByteLevel", "use_regex": false}, split(nil),
			}}
		}, "", "splits after ByteLevel"},
		{"model", func(f map[string]any) { f["model"].(map[string]any)["type"] = "WordPiece" }, "", `model type "WordPiece"`},
		{"dropout", func(f map[string]any) { f["model"].(map[string]any)["dropout"] = 0.1 }, "", "dropout"},
		{"prefix", func(f map[string]any) { f["model"].(map[string]any)["continuing_subword_prefix"] = "##" }, "", "continuing_subword_prefix"},
		{"merge", func(f map[string]any) { f["model"].(map[string]any)["merges"] = []any{"x yz"} }, "", "outside the vocabulary"},
		{"bad merge", func(f map[string]any) { f["model"].(map[string]any)["merges"] = []any{"xyz"} }, "", "not two tokens"},
		{"post-processor", func(f map[string]any) { f["post_processor"] = map[string]any{"type": "Odd"} }, "", `post_processor "Odd"`},
		{"truncation", func(f map[string]any) { f["truncation"] = map[string]any{"max_length": 5} }, "", "truncation"},
		{"byte missing", func(f map[string]any) { delete(f["model"].(map[string]any)["vocab"].(map[string]any), "a") }, "", "lacks byte 0x61"},
		{"no bos", func(map[string]any) {}, `{"tokenizer_class": "LlamaTokenizerFast"}`, "bos_token is needed"},
		{"from slow", func(map[string]any) {}, `{"tokenizer_class": "LlamaTokenizerFast", "add_prefix_space": false}`, "rebuilt from the SentencePiece model"},
		{"metaspace", func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "ab"}
		}, "", "not one character"},
		{"unknown bos", func(map[string]any) {}, `{"tokenizer_class": "GemmaTokenizer", "bos_token": "<nope>"}`, `names token "<nope>"`},
		{"config-only special", func(map[string]any) {}, `{"additional_special_tokens": ["<x>"]}`, `names token "<x>"`},
		{"config-only added", func(map[string]any) {}, `{"added_tokens_decoder": {"300": {"content": "<y>"}}}`, `names token "<y>"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tinyFile()
			tt.patch(f)
			data, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			var cfg []byte
			if tt.config != "" {
				cfg = []byte(tt.config)
			}
			_, err = New(data, cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestNewMalformed(t *testing.T) {
	for _, in := range []string{"", "{", `{"model": {"vocab": {"a": -1}}}`, `{"model": {"vocab": {"a": 1}}} x`, `[1]`, `{"model": {"vocab": {"a\u": 1}}}`} {
		if _, err := New([]byte(in), nil); err == nil {
			t.Errorf("New(%q) = nil error, want one", in)
		}
	}
}

// TestConfigTemplates checks add_bos_token/add_eos_token of the Llama and
// Gemma classes, and that other classes keep tokenizer.json's template.
func TestConfigTemplates(t *testing.T) {
	f := tinyFile()
	f["added_tokens"] = []any{map[string]any{"id": 300, "content": "<s>", "special": true}, map[string]any{"id": 301, "content": "</s>", "special": true}}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		config string
		want   string
	}{
		{`{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>"}`, "[257 104]"},
		{`{"tokenizer_class": "LlamaTokenizer", "bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_eos_token": true}`, "[257 104 258]"},
		{`{"tokenizer_class": "GemmaTokenizerFast", "add_bos_token": false, "eos_token": "</s>", "add_eos_token": true}`, "[104 258]"},
		{`{"tokenizer_class": "Qwen2Tokenizer", "bos_token": "<s>", "add_bos_token": true}`, "[104]"},
	}
	for _, tt := range tests {
		tok, err := New(data, []byte(tt.config))
		if err != nil {
			t.Fatalf("New(config %s): %v", tt.config, err)
		}
		ids, err := tok.Encode("h", true)
		if got := fmt.Sprint(ids); err != nil || got != tt.want {
			t.Errorf("config %s: Encode(h, true) = %v, %v, want %s", tt.config, ids, err, tt.want)
		}
	}
}
