package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// variants change one component of a real tokenizer.json to exercise
// settings the six models do not use; each is checked against the live
// oracle on a sample of the corpus.
var variants = []struct {
	name, base string
	patch      map[string]any // top-level fields replaced
}{
	{"bytelevel-regex-prefix", "qwen3", map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
	}},
	{"split-merged-with-next", "qwen3", map[string]any{
		"pre_tokenizer": sequence(split(`\s+`, "MergedWithNext"), byteLevel()),
	}},
	{"split-removed-contiguous", "qwen3", map[string]any{
		"pre_tokenizer": sequence(split(`[aeiou]`, "Removed"), split(`\p{P}`, "Contiguous"), byteLevel()),
	}},
	{"split-merged-with-previous", "qwen3", map[string]any{
		"pre_tokenizer": sequence(split(`\p{N}+|(?i:the)`, "MergedWithPrevious"), byteLevel()),
		"normalizer":    map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Replace", "pattern": map[string]any{"String": "is"}, "content": "IS"}}},
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
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join(modelDir(t, v.base), "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			var file map[string]json.RawMessage
			if err := json.Unmarshal(data, &file); err != nil {
				t.Fatal(err)
			}
			for k, p := range v.patch {
				if file[k], err = json.Marshal(p); err != nil {
					t.Fatal(err)
				}
			}
			out, err := json.Marshal(file)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o600))
			tok, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, v.name, tok, sample, oracleIDsDir(t, dir, sample))
		})
	}
}
