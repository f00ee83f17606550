package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// variants change one component of a real tokenizer.json to exercise
// settings the six models do not use; each is checked against the live
// oracle on a sample of the corpus.
var variants = []struct {
	name, base string
	patch      map[string]any // top-level fields replaced
}{
	{"bytelevel-regex-prefix-added-options", "qwen3", map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		"added_tokens":  qwenAddedVariant(),
	}},
	{"split-behaviors", "qwen3", map[string]any{
		"pre_tokenizer": sequence(
			split(`\s+`, "MergedWithNext"), split(`[aeiou]`, "Removed"), split(`\p{P}`, "Contiguous"),
			split(`\p{N}+|(?i:the)`, "MergedWithPrevious"), byteLevel()),
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "NFC"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "is"}, "content": "IS"},
		}},
	}},
	{"digits-punctuation", "qwen3", map[string]any{
		"pre_tokenizer": sequence(
			map[string]any{"type": "Digits", "individual_digits": true},
			map[string]any{"type": "Punctuation", "behavior": "Contiguous"},
			split(tekkenPattern, "Isolated"),
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
	}},
	{"digits-runs-punctuation", "llama2", map[string]any{
		"pre_tokenizer": sequence(
			map[string]any{"type": "Digits", "individual_digits": false},
			map[string]any{"type": "Punctuation", "behavior": "Isolated"}),
	}},
	{"metaspace-first", "llama2", map[string]any{
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
	}},
	{"metaspace-always-split", "llama2", map[string]any{
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
	}},
	{"sentencepiece-split", "llama2", map[string]any{
		"pre_tokenizer": split(`\s+(?!\S)|\s+|\p{L}+`, "Isolated"),
	}},
}

// addedTexts exercise the added tokens of qwenAddedVariant.
var addedTexts = []string{
	"hello world", "say hello", "hello_there", "_hello", "hello1", "hello!", "(hello)", "héllo hello", "hello\u0301",
	"  <|im_start|>  x <|im_end|>  y", "\t<|im_start|>\n<|im_end|>\n\n", "singing", "sing ing", "ing", "ing.",
	" world  world", "a\u00a0 world\t", "x world", "world", "<|im_end|> world", "Ⅻhello", "hello٣", "_x _x a_x _xb",
	"hello½", "½hello", "hello\u200d", "hello‿", "hello\u0345", "hello²",
}

// qwenAddedVariant is Qwen3's added tokens with lstrip, rstrip and
// single_word set on some, and new ones.
func qwenAddedVariant() []any {
	tokens := []any{
		map[string]any{"id": 151643, "content": "<|endoftext|>", "special": true},
		map[string]any{"id": 151644, "content": "<|im_start|>", "special": true, "lstrip": true},
		map[string]any{"id": 151645, "content": "<|im_end|>", "special": true, "rstrip": true},
		map[string]any{"id": 151669, "content": "hello", "single_word": true},
		map[string]any{"id": 151670, "content": "ing", "single_word": true, "normalized": true},
		map[string]any{"id": 151671, "content": " world", "lstrip": true, "rstrip": true},
		map[string]any{"id": 151672, "content": "_x", "single_word": true},
	}
	for _, t := range tokens {
		for _, k := range []string{"special", "lstrip", "rstrip", "single_word", "normalized"} {
			if _, ok := t.(map[string]any)[k]; !ok {
				t.(map[string]any)[k] = false
			}
		}
	}
	return tokens
}

func sequence(steps ...any) map[string]any {
	return map[string]any{"type": "Sequence", "pretokenizers": steps}
}

func split(re, behavior string) map[string]any {
	return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": re}, "behavior": behavior, "invert": false}
}

func byteLevel() map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
}

func TestOracleVariants(t *testing.T) {
	texts := readCorpus(t)
	var sample []string
	for i, s := range texts {
		if i%53 == 0 && len(s) < 2000 || i < len(handWritten) {
			sample = append(sample, s)
		}
	}
	sample = append(sample, addedTexts...)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join(oracle.ModelDir(t, v.base), "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := patchJSON(data, v.patch)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o600))
			tok, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, v.name, tok, sample, oracle.IDs(t, dir, sample))
		})
	}
}

// patchJSON replaces top-level fields of a JSON object (fast on big files).
func patchJSON(data []byte, patch map[string]any) ([]byte, error) {
	s := jsonlex.New(data, jsonlex.Options{})
	out := []byte{'{'}
	err := s.Object(func(keyBytes []byte) error {
		key := string(keyBytes)
		raw, err := s.Raw()
		if err != nil {
			return err
		}
		if p, ok := patch[key]; ok {
			if raw, err = json.Marshal(p); err != nil {
				return err
			}
		}
		k, _ := json.Marshal(key)
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, k...), ':'), raw...)
		return nil
	})
	return append(out, '}'), err
}
