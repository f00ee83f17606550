package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// parseFile reads tokenizer.json: the vocabulary and merges with the fast
// scanner, every other part with encoding/json.
func parseFile(data []byte) (*fileJSON, error) {
	f := &fileJSON{}
	s := &jsonScanner{data: data}
	top := map[string]*json.RawMessage{
		"added_tokens": nil, "normalizer": &f.Normalizer, "pre_tokenizer": &f.PreTokenizer,
		"post_processor": &f.PostProcessor, "truncation": &f.Truncation, "padding": &f.Padding,
	}
	var added json.RawMessage
	top["added_tokens"] = &added
	err := s.object(func(key string) error {
		if key == "model" {
			return parseModel(s, f)
		}
		raw, err := s.raw()
		if dst := top[key]; dst != nil {
			*dst = raw
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.peek() != 0 {
		return nil, s.fail("data after the top-level object")
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
func parseModel(s *jsonScanner, f *fileJSON) error {
	var rest bytes.Buffer
	rest.WriteByte('{')
	err := s.object(func(key string) error {
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
			f.merges = &jsonScanner{data: s.data, pos: s.pos}
			return s.skip()
		}
		raw, err := s.raw()
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
func parseVocab(s *jsonScanner) (map[string]uint32, error) {
	var toks []string
	var ids []uint32
	err := s.object(func(tok string) error {
		id, err := s.integer()
		toks = append(toks, tok)
		ids = append(ids, uint32(id))
		return err
	})
	v := make(map[string]uint32, len(toks))
	for i, tok := range toks {
		v[tok] = ids[i]
	}
	return v, err
}

// eachMerge calls fn with the two sides of every merge, accepting both
// spellings: ["a b", ...] and [["a", "b"], ...]. The sides may alias the
// input: fn must not keep them.
func eachMerge(s *jsonScanner, fn func(a, b []byte) error) error {
	if s == nil || s.peek() == 'n' {
		return nil // no merges
	}
	return s.array(func() error {
		if s.peek() == '[' {
			s.pos++
			a, err := s.strBytes()
			if err != nil {
				return err
			}
			if err := s.expect(','); err != nil {
				return err
			}
			b, err := s.strBytes()
			if err != nil {
				return err
			}
			if err := s.expect(']'); err != nil {
				return s.fail("a merge is not two tokens")
			}
			return fn(a, b)
		}
		line, err := s.strBytes()
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
