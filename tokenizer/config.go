package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// configure applies tokenizer_config.json the way transformers' fast
// tokenizers do: the Llama and Gemma classes replace the post-processor by
// one adding BOS and/or EOS as add_bos_token (default true) and
// add_eos_token (default false) say. Other classes keep tokenizer.json's.
func (t *Tokenizer) configure(data []byte, f *fileJSON) error {
	var c configJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
	}
	switch strings.TrimSuffix(c.TokenizerClass, "Fast") {
	case "LlamaTokenizer", "GemmaTokenizer", "CodeLlamaTokenizer":
	default:
		return nil
	}
	if c.AddPrefixSpace != nil || c.FromSlow {
		return fmt.Errorf("tokenizer: tokenizer_config.json: %s with add_prefix_space or from_slow is rebuilt from the SentencePiece model: not supported", c.TokenizerClass)
	}
	addBos := c.AddBosToken == nil || *c.AddBosToken
	addEos := c.AddEosToken != nil && *c.AddEosToken
	tmpl := &template{}
	if addBos {
		id, err := configTokenID(c.BosToken, f, "bos_token")
		if err != nil {
			return err
		}
		tmpl.prefix = []uint32{id}
	}
	if addEos {
		id, err := configTokenID(c.EosToken, f, "eos_token")
		if err != nil {
			return err
		}
		tmpl.suffix = []uint32{id}
	}
	t.post = tmpl
	return nil
}

// configTokenID resolves a token of tokenizer_config.json, written as a
// string or as {"content": ...}, to its id.
func configTokenID(raw json.RawMessage, f *fileJSON, field string) (uint32, error) {
	if isNull(raw) {
		return 0, fmt.Errorf("tokenizer: tokenizer_config.json: %s is needed but missing", field)
	}
	var content string
	if err := json.Unmarshal(raw, &content); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return 0, fmt.Errorf("tokenizer: tokenizer_config.json: %s: %w", field, err)
		}
		content = obj.Content
	}
	for _, a := range f.AddedTokens {
		if a.Content == content {
			return uint32(a.ID), nil
		}
	}
	if id, ok := f.Vocab[content]; ok {
		return uint32(id), nil
	}
	return 0, fmt.Errorf("tokenizer: tokenizer_config.json: %s %q is not a token", field, content)
}
