package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// maxTokenID bounds the ids a tokenizer file may use.
const maxTokenID = 1<<31 - 1

// Tokenizer turns text into the token ids the HuggingFace Rust tokenizers
// produce for the same tokenizer.json (and tokenizer_config.json). It is
// immutable after loading and safe for concurrent use.
type Tokenizer struct {
	raw        *addedSet  // added tokens matched in the raw text
	normAdded  *addedSet  // added tokens matched in normalized text
	normalizer normalizer // nil: none
	steps      []step     // pre-tokenization steps, in order
	model      *bpe
	post       *template // nil: add_special_tokens adds nothing
	cache      *wordCache
	hot        *hotPool
	prefixes   *PrefixCache // set by a Registry before it hands t out; nil: none
	size       int
	// lineCuts: a stretch of text encodes as its pieces cut at line
	// starts would, one by one (see cutsAtLines).
	lineCuts bool
}

// Prefixes returns the prefix cache a Registry keeps for t (see
// Config.PrefixCacheBytes), or nil: a Tokenizer from Load or New has none.
func (t *Tokenizer) Prefixes() *PrefixCache { return t.prefixes }

// Load reads tokenizer.json and, when present, tokenizer_config.json from dir.
func Load(dir string) (*Tokenizer, error) {
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := New(tj, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	return t, nil
}

// New builds a tokenizer from the contents of tokenizer.json and of
// tokenizer_config.json (nil when there is none). Anything in them that would
// change token ids and is not implemented is an error.
func New(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	f, err := parseFile(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	if !isNull(f.Truncation) || !isNull(f.Padding) {
		return nil, errors.New("tokenizer: truncation and padding not supported")
	}
	t := &Tokenizer{cache: newWordCache(), hot: newHotPool()}
	if t.normalizer, err = newNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	var byteLevel bool
	if t.steps, byteLevel, err = newPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if len(t.steps) > maxSteps {
		return nil, fmt.Errorf("tokenizer: %d pre-tokenization steps, at most %d supported", len(t.steps), maxSteps)
	}
	if t.model, err = newBPE(f, byteLevel); err != nil {
		return nil, err
	}
	t.size = t.model.size
	if err := t.addTokens(f); err != nil {
		return nil, err
	}
	if t.post, err = newPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if len(configJSON) > 0 {
		if err := t.configure(configJSON, f); err != nil {
			return nil, err
		}
	}
	t.lineCuts = t.cutsAtLines()
	if t.post != nil {
		for _, id := range append(t.post.prefix[:len(t.post.prefix):len(t.post.prefix)], t.post.suffix...) {
			t.size = max(t.size, int(id)+1)
		}
	}
	return t, nil
}

// addTokens registers the added tokens. Their ids are assigned as the Rust
// tokenizers assign them, whatever the file says: a token already added or
// in the vocabulary keeps that id, any other takes the next one after the
// vocabulary's size and the ids given so far. (In files saved by the
// library the two agree.) The assigned ids are written back into f.
func (t *Tokenizer) addTokens(f *fileJSON) error {
	t.raw, t.normAdded = newAddedSet(), newAddedSet()
	given := map[string]int{}
	next := len(f.Vocab)
	for i := range f.AddedTokens {
		a := &f.AddedTokens[i]
		if id, ok := given[a.Content]; ok {
			a.ID = id
		} else if id, ok := f.Vocab[a.Content]; ok {
			a.ID = int(id)
		} else {
			a.ID = next
		}
		given[a.Content] = a.ID
		next = max(next, a.ID+1)
		if a.ID > maxTokenID {
			return fmt.Errorf("tokenizer: added token %q: id %d out of range", a.Content, a.ID)
		}
		t.size = max(t.size, a.ID+1)
		tok := addedToken{id: uint32(a.ID), singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		if !a.Normalized {
			t.raw.add(a.Content, tok)
			continue
		}
		content := a.Content
		if t.normalizer != nil {
			content = t.normalizer.normalize(content)
		}
		t.normAdded.add(content, tok)
	}
	return nil
}

// VocabSize returns one more than the largest id the tokenizer can produce.
func (t *Tokenizer) VocabSize() int { return t.size }
