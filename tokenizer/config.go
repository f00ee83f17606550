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
	if err := checkConfigTokens(&c, f); err != nil {
		return err
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
	content, err := tokenContent(raw)
	if err != nil {
		return 0, fmt.Errorf("tokenizer: tokenizer_config.json: %s: %w", field, err)
	}
	if content == "" {
		return 0, fmt.Errorf("tokenizer: tokenizer_config.json: %s is needed but missing", field)
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

// checkConfigTokens refuses a tokenizer_config.json naming special or added
// tokens that tokenizer.json does not list as added tokens: transformers
// would add them, and they would then be matched in text.
func checkConfigTokens(c *configJSON, f *fileJSON) error {
	have := make(map[string]bool, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		have[a.Content] = true
	}
	raws := []json.RawMessage{c.BosToken, c.EosToken, c.UnkToken, c.PadToken, c.SepToken, c.ClsToken, c.MaskToken}
	raws = append(raws, c.Additional...)
	for _, r := range c.AddedDecoder {
		raws = append(raws, r)
	}
	for _, r := range raws {
		content, err := tokenContent(r)
		if err != nil {
			return fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
		}
		if content != "" && !have[content] {
			return fmt.Errorf("tokenizer: tokenizer_config.json names token %q, which tokenizer.json does not add: not supported", content)
		}
	}
	return nil
}

// tokenContent reads a token written as a string or as {"content": ...};
// "" for null.
func tokenContent(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var content string
	if err := json.Unmarshal(raw, &content); err == nil {
		return content, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	err := json.Unmarshal(raw, &obj)
	return obj.Content, err
}
