package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
)

// template is what add_special_tokens=true puts around a single sequence.
type template struct {
	prefix, suffix []uint32
}

// newPostProcessor reads a post-processor; nil when it adds nothing.
func newPostProcessor(raw json.RawMessage) (*template, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil // offsets only
	case "TemplateProcessing":
		return newTemplate(&c)
	case "BertProcessing", "RobertaProcessing":
		cls, err1 := tokenPairID(c.Cls)
		sep, err2 := tokenPairID(c.Sep)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("tokenizer: post_processor %s: %w", c.Type, err)
		}
		return &template{prefix: []uint32{cls}, suffix: []uint32{sep}}, nil
	case "Sequence":
		var out *template
		for _, r := range c.Processors {
			t, err := newPostProcessor(r)
			if err != nil {
				return nil, err
			}
			if t != nil && out != nil {
				return nil, errors.New("tokenizer: post_processor Sequence with two templates not supported")
			}
			if t != nil {
				out = t
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("tokenizer: post_processor %q not supported", c.Type)
	}
}

func newTemplate(c *componentJSON) (*template, error) {
	t := &template{}
	seen := false
	for _, p := range c.Single {
		switch {
		case p.Sequence != nil:
			if seen || p.Sequence.ID != "A" {
				return nil, fmt.Errorf("tokenizer: post_processor template: sequence %q not supported", p.Sequence.ID)
			}
			seen = true
		case p.SpecialToken != nil:
			sp, ok := c.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("tokenizer: post_processor template: special token %q undefined", p.SpecialToken.ID)
			}
			for _, id := range sp.IDs {
				if id < 0 || id > maxTokenID {
					return nil, fmt.Errorf("tokenizer: post_processor template: id %d out of range", id)
				}
				if seen {
					t.suffix = append(t.suffix, uint32(id))
				} else {
					t.prefix = append(t.prefix, uint32(id))
				}
			}
		default:
			return nil, errors.New("tokenizer: post_processor template: empty piece")
		}
	}
	if !seen {
		return nil, errors.New("tokenizer: post_processor template without $A")
	}
	return t, nil
}

// tokenPairID reads the id of a [token, id] pair.
func tokenPairID(pair []any) (uint32, error) {
	if len(pair) != 2 {
		return 0, errors.New("want [token, id]")
	}
	f, ok := pair[1].(float64)
	if !ok || f < 0 || f > maxTokenID || f != float64(uint32(f)) {
		return 0, fmt.Errorf("bad id %v", pair[1])
	}
	return uint32(f), nil
}
