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

func parseVocab(s *jsonScanner) (map[string]uint32, error) {
	v := make(map[string]uint32, len(s.data)/40)
	err := s.object(func(tok string) error {
		id, err := s.integer()
		v[tok] = uint32(id)
		return err
	})
	return v, err
}

// eachMerge calls fn with the two sides of every merge, accepting both
// spellings: ["a b", ...] and [["a", "b"], ...].
func eachMerge(s *jsonScanner, fn func(a, b string) error) error {
	if s == nil || s.peek() == 'n' {
		return nil // no merges
	}
	return s.array(func() error {
		if s.peek() == '[' {
			var pair []string
			err := s.array(func() error {
				t, err := s.str()
				pair = append(pair, t)
				return err
			})
			if err != nil {
				return err
			}
			if len(pair) != 2 {
				return s.fail("a merge is not two tokens")
			}
			return fn(pair[0], pair[1])
		}
		line, err := s.str()
		if err != nil {
			return err
		}
		i := bytes.IndexByte([]byte(line), ' ')
		if i < 0 || bytes.IndexByte([]byte(line[i+1:]), ' ') >= 0 {
			return fmt.Errorf("tokenizer: BPE merge %q is not two tokens", line)
		}
		return fn(line[:i], line[i+1:])
	})
}
