package tokenizer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
)

// bpe is a BPE model: a vocabulary, ranked merges and how words that are not
// in the vocabulary fall back to bytes or the unknown token.
type bpe struct {
	// vocab maps a token's text to its id. For byte-level models the key is
	// the raw bytes the token stands for, not its byte-level spelling.
	vocab *strTable
	// longest is the length of the longest key of vocab.
	longest int
	// whole says, for each slot of vocab, whether the word that is its key
	// merges into that one token: such a word is encoded by one lookup.
	whole wholeWords
	// merges maps a pair (left<<32 | right) to rank<<32 | merged id.
	merges map[uint64]uint64
	// byteLevel: words are raw bytes and start as one symbol per byte.
	byteLevel bool
	// byteID is the id of each byte: its byte-level token, or its <0xXX>
	// fallback token; -1 where absent.
	byteID [256]int64
	// byteFallback: a character missing from the vocabulary becomes <0xXX>
	// tokens when all of its bytes have one.
	byteFallback bool
	unkID        int64 // -1 without an unknown token
	fuseUnk      bool
	ignoreMerges bool
	size         int // number of ids: max id + 1 over vocab and added tokens
}

var errNoUnk = errors.New("tokenizer: character outside the vocabulary and no unk_token")

// newBPE builds the model from tokenizer.json. byteLevel is set when the
// pre-tokenizer maps bytes to characters (ByteLevel).
func newBPE(f *fileJSON, byteLevel bool) (*bpe, error) {
	m := &f.Model
	if m.Type != "BPE" && m.Type != "" {
		return nil, fmt.Errorf("tokenizer: model type %q not supported (only BPE)", m.Type)
	}
	var errs []error
	if m.Dropout != nil && *m.Dropout != 0 {
		errs = append(errs, fmt.Errorf("tokenizer: BPE dropout %v not supported", *m.Dropout))
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		errs = append(errs, errors.New("tokenizer: BPE continuing_subword_prefix not supported"))
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		errs = append(errs, errors.New("tokenizer: BPE end_of_word_suffix not supported"))
	}
	if len(f.Vocab) == 0 {
		errs = append(errs, errors.New("tokenizer: BPE vocabulary is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	b := &bpe{
		byteLevel:    byteLevel,
		byteFallback: m.ByteFallback,
		fuseUnk:      m.FuseUnk,
		ignoreMerges: m.IgnoreMerges,
		unkID:        -1,
	}
	if err := b.buildVocab(f); err != nil {
		return nil, err
	}
	if err := b.buildMerges(f); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bpe) buildVocab(f *fileJSON) error {
	vocab := f.Vocab
	if b.byteLevel {
		vocab = make(map[string]uint32, len(f.Vocab))
	}
	for tok, id := range f.Vocab {
		b.size = max(b.size, int(id)+1)
		if b.byteLevel {
			if raw, ok := fromByteLevel(tok); ok {
				vocab[raw] = id
			} // else only reachable as an added token
		}
	}
	var ok bool
	if b.vocab, ok = newStrTable(vocab); !ok {
		return fmt.Errorf("tokenizer: vocabulary of %d tokens too large", len(vocab))
	}
	for k := range vocab {
		b.longest = max(b.longest, len(k))
	}
	b.whole = newWholeWords(b.vocab.cap())
	for i := range b.byteID {
		b.byteID[i] = -1
		if b.byteLevel {
			id, ok := vocab[string([]byte{byte(i)})]
			if !ok {
				return fmt.Errorf("tokenizer: byte-level vocabulary lacks byte %#02x", i)
			}
			b.byteID[i] = int64(id)
		} else if id, ok := f.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteID[i] = int64(id)
		}
	}
	if m := &f.Model; m.UnkToken != nil {
		id, ok := f.Vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("tokenizer: unk_token %q not in the vocabulary", *m.UnkToken)
		}
		b.unkID = int64(id)
	}
	return nil
}

func (b *bpe) buildMerges(f *fileJSON) error {
	pairs, values := f.mergePairs, f.mergeValues
	if f.merges != nil {
		var err error
		if pairs, values, err = collectMerges(f.merges, f.Vocab); err != nil {
			return fileError(err)
		}
	}
	b.merges = make(map[uint64]uint64, len(pairs))
	for i, key := range pairs {
		if _, dup := b.merges[key]; !dup {
			b.merges[key] = values[i]
		}
	}
	return nil
}

// collectMerges reads the merges array at s into pairs (left<<32 | right)
// and values (rank<<32 | merged id), so that the map can be sized exactly.
func collectMerges(s *jsonlex.Lexer, vocab map[string]uint32) (pairs, values []uint64, err error) {
	var buf []byte
	err = eachMerge(s, func(l, r []byte) error {
		buf = append(append(buf[:0], l...), r...)
		lid, ok1 := vocab[string(l)]
		rid, ok2 := vocab[string(r)]
		nid, ok3 := vocab[string(buf)]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("tokenizer: BPE merge %q %q uses tokens outside the vocabulary", l, r)
		}
		pairs = append(pairs, uint64(lid)<<32|uint64(rid))
		values = append(values, uint64(len(values))<<32|uint64(nid))
		return nil
	})
	return pairs, values, err
}

// symbols appends the initial symbols of word to syms: one per byte for
// byte-level models, else one per character with byte fallback and unknown
// tokens.
func (b *bpe) symbols(word string, syms []uint32) ([]uint32, error) {
	if b.byteLevel {
		for i := 0; i < len(word); i++ {
			syms = append(syms, uint32(b.byteID[word[i]]))
		}
		return syms, nil
	}
	lastUnk := false
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+n]
		i += n
		if id, ok := b.vocab.get(ch); ok {
			syms = append(syms, id)
			lastUnk = false
			continue
		}
		if b.byteFallback && b.allBytes(ch) {
			for j := 0; j < len(ch); j++ {
				syms = append(syms, uint32(b.byteID[ch[j]]))
			}
			lastUnk = false
			continue
		}
		if b.unkID < 0 {
			return syms, errNoUnk
		}
		if !b.fuseUnk || !lastUnk {
			syms = append(syms, uint32(b.unkID))
		}
		lastUnk = true
	}
	return syms, nil
}

func (b *bpe) allBytes(ch string) bool {
	for j := 0; j < len(ch); j++ {
		if b.byteID[ch[j]] < 0 {
			return false
		}
	}
	return true
}

// rank returns the rank and merged id of the pair (l, r).
func (b *bpe) rank(l, r uint32) (rank, id uint32, ok bool) {
	v, ok := b.merges[uint64(l)<<32|uint64(r)]
	return uint32(v >> 32), uint32(v), ok
}

// wholeWords holds two bits per slot of a vocabulary's table: unknown, or
// whether the key merges into its own token. A bit is learned the first
// time its word is encoded the long way, so a vocabulary costs nothing more
// to load; it is read and written without locks.
type wholeWords []atomic.Uint32

const (
	wordUnknown = iota
	wordWhole
	wordSplit
)

func newWholeWords(slots int) wholeWords { return make(wholeWords, (slots+15)/16) }

func (w wholeWords) get(slot int) uint32 { return w[slot/16].Load() >> (2 * (slot % 16)) & 3 }

func (w wholeWords) set(slot int, whole bool) {
	v := uint32(wordSplit)
	if whole {
		v = wordWhole
	}
	w[slot/16].Or(v << (2 * (slot % 16)))
}
