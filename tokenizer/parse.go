package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
)

// parseFile reads tokenizer.json: the vocabulary and merges with the
// lexer, every other part with encoding/json.
func parseFile(data []byte) (*fileJSON, error) {
	f, err := scanFile(data)
	return f, fileError(err)
}

// fileError says where a lexer's error comes from.
func fileError(err error) error {
	var syntax *jsonlex.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	return err
}

// scanFile is parseFile leaving the lexer's errors unwrapped.
func scanFile(data []byte) (*fileJSON, error) {
	f := &fileJSON{}
	s := jsonlex.New(data, jsonlex.Options{})
	top := map[string]*json.RawMessage{
		"added_tokens": nil, "normalizer": &f.Normalizer, "pre_tokenizer": &f.PreTokenizer,
		"post_processor": &f.PostProcessor, "truncation": &f.Truncation, "padding": &f.Padding,
	}
	var added json.RawMessage
	top["added_tokens"] = &added
	err := s.Object(func(key []byte) error {
		if string(key) == "model" {
			return parseModel(s, f)
		}
		dst := top[string(key)]
		raw, err := s.Raw()
		if dst != nil {
			*dst = raw
		}
		return err
	})
	if err == nil {
		err = s.End()
	}
	if err != nil {
		return nil, err
	}
	if !isNull(added) {
		if err := json.Unmarshal(added, &f.AddedTokens); err != nil {
			return nil, fmt.Errorf("tokenizer: added_tokens: %w", err)
		}
	}
	return f, nil
}

// parseModel reads the model object: vocab into f.Vocab, the position of
// merges into f.merges, everything else into f.Model.
func parseModel(s *jsonlex.Lexer, f *fileJSON) error {
	var rest bytes.Buffer
	rest.WriteByte('{')
	err := s.Object(func(keyBytes []byte) error {
		key := string(keyBytes) // the value's keys may overwrite keyBytes
		switch key {
		case "vocab":
			v, err := parseVocab(s)
			f.Vocab = v
			return err
		case "merges":
			if f.Vocab != nil { // the usual order: read them now
				var err error
				f.mergePairs, f.mergeValues, err = collectMerges(s, f.Vocab)
				return err
			}
			f.merges = s.Fork()
			return s.Skip()
		}
		raw, err := s.Raw()
		if err != nil {
			return err
		}
		if rest.Len() > 1 {
			rest.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		rest.Write(k)
		rest.WriteByte(':')
		rest.Write(raw)
		return nil
	})
	if err != nil {
		return err
	}
	rest.WriteByte('}')
	if err := json.Unmarshal(rest.Bytes(), &f.Model); err != nil {
		return fmt.Errorf("tokenizer: model: %w", err)
	}
	return nil
}

// parseVocab reads the vocabulary into a map of exactly its size.
func parseVocab(s *jsonlex.Lexer) (map[string]uint32, error) {
	var toks []string
	var ids []uint32
	err := s.Object(func(tok []byte) error {
		toks = append(toks, string(tok))
		id, err := tokenID(s)
		ids = append(ids, id)
		return err
	})
	v := make(map[string]uint32, len(toks))
	for i, tok := range toks {
		v[tok] = ids[i]
	}
	return v, err
}

// tokenID reads a vocabulary id: an integer in [0, maxTokenID].
func tokenID(s *jsonlex.Lexer) (uint32, error) {
	tok, err := s.Number()
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(string(tok), 10, 32)
	if err != nil || id > maxTokenID {
		return 0, fmt.Errorf("tokenizer: vocabulary id %s is not a token id", tok)
	}
	return uint32(id), nil
}

// eachMerge calls fn with the two sides of every merge, accepting both
// spellings: ["a b", ...] and [["a", "b"], ...]. The sides may alias the
// input: fn must not keep them.
func eachMerge(s *jsonlex.Lexer, fn func(a, b []byte) error) error {
	if s == nil {
		return nil // no merges
	}
	if s.Peek() == jsonlex.Null {
		return s.Null()
	}
	var first []byte
	return s.Array(func() error {
		if s.Peek() == jsonlex.Array {
			a, b, err := mergePair(s, &first)
			if err != nil {
				return err
			}
			return fn(a, b)
		}
		line, err := s.StrBytes()
		if err != nil {
			return err
		}
		i := bytes.IndexByte(line, ' ')
		if i < 0 || bytes.IndexByte(line[i+1:], ' ') >= 0 {
			return fmt.Errorf("tokenizer: BPE merge %q is not two tokens", line)
		}
		return fn(line[:i], line[i+1:])
	})
}

// mergePair reads a merge spelled ["a", "b"]. a is copied into *first:
// reading b may reuse the lexer's buffer.
func mergePair(s *jsonlex.Lexer, first *[]byte) (a, b []byte, err error) {
	n := 0
	err = s.Array(func() error {
		side, err := s.StrBytes()
		switch n {
		case 0:
			*first = append((*first)[:0], side...)
			a = *first
		case 1:
			b = side
		}
		n++
		return err
	})
	if err == nil && n != 2 {
		err = errors.New("tokenizer: a BPE merge is not two tokens")
	}
	return a, b, err
}
