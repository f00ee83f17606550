package tokenizer

import (
	"encoding/json"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
)

// fileJSON is the part of a tokenizer.json file the encoder reads.
type fileJSON struct {
	AddedTokens   []addedTokenJSON  `json:"added_tokens"`
	Normalizer    json.RawMessage   `json:"normalizer"`
	PreTokenizer  json.RawMessage   `json:"pre_tokenizer"`
	PostProcessor json.RawMessage   `json:"post_processor"`
	Model         modelJSON         `json:"-"`
	Vocab         map[string]uint32 `json:"-"`
	merges        *jsonlex.Lexer    // at the merges array when read before the vocabulary
	mergePairs    []uint64          // merges read after the vocabulary: left<<32 | right
	mergeValues   []uint64          // and rank<<32 | merged id
	Truncation    json.RawMessage   `json:"truncation"`
	Padding       json.RawMessage   `json:"padding"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	UnkToken                *string  `json:"unk_token"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	FuseUnk                 bool     `json:"fuse_unk"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
}

// componentJSON is any normalizer, pre-tokenizer or post-processor: the
// fields of every supported type, told apart by Type.
type componentJSON struct {
	Type string `json:"type"`

	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`

	// Prepend, Replace, Split
	Prepend  string       `json:"prepend"`
	Pattern  *patternJSON `json:"pattern"`
	Content  string       `json:"content"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`

	// Digits
	IndividualDigits bool `json:"individual_digits"`

	// ByteLevel, Metaspace
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`

	// TemplateProcessing
	Single        []templatePieceJSON            `json:"single"`
	SpecialTokens map[string]templateSpecialJSON `json:"special_tokens"`

	// BertProcessing, RobertaProcessing: [token, id]
	Sep []any `json:"sep"`
	Cls []any `json:"cls"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecialJSON struct {
	IDs []int `json:"ids"`
}

// configJSON is the part of tokenizer_config.json that changes token ids.
type configJSON struct {
	TokenizerClass string                     `json:"tokenizer_class"`
	AddBosToken    *bool                      `json:"add_bos_token"`
	AddEosToken    *bool                      `json:"add_eos_token"`
	BosToken       json.RawMessage            `json:"bos_token"`
	EosToken       json.RawMessage            `json:"eos_token"`
	AddPrefixSpace *bool                      `json:"add_prefix_space"`
	FromSlow       bool                       `json:"from_slow"`
	UnkToken       json.RawMessage            `json:"unk_token"`
	PadToken       json.RawMessage            `json:"pad_token"`
	SepToken       json.RawMessage            `json:"sep_token"`
	ClsToken       json.RawMessage            `json:"cls_token"`
	MaskToken      json.RawMessage            `json:"mask_token"`
	Additional     []json.RawMessage          `json:"additional_special_tokens"`
	AddedDecoder   map[string]json.RawMessage `json:"added_tokens_decoder"`
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(m json.RawMessage) bool {
	return len(m) == 0 || string(m) == "null"
}
