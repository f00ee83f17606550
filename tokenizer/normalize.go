package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// normalizer rewrites text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type (
	nfcNormalizer      struct{}
	prependNormalizer  struct{ prefix string }
	replaceNormalizer  struct{ old, new string }
	sequenceNormalizer []normalizer
)

func (nfcNormalizer) normalize(s string) string { return nfc(s) }

// normalize prepends the prefix to non-empty text, as the Rust Prepend does.
func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

func (r replaceNormalizer) normalize(s string) string {
	return strings.ReplaceAll(s, r.old, r.new)
}

func (q sequenceNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// newNormalizer builds a normalizer from its JSON; nil JSON gives nil.
func newNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer: normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return nfcNormalizer{}, nil
	case "Prepend":
		return prependNormalizer{c.Prepend}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return nil, errors.New("tokenizer: normalizer Replace: only string patterns are supported")
		}
		if *c.Pattern.String == "" {
			return nil, errors.New("tokenizer: normalizer Replace: empty pattern")
		}
		return replaceNormalizer{*c.Pattern.String, c.Content}, nil
	case "Sequence":
		seq := make(sequenceNormalizer, 0, len(c.Normalizers))
		for _, r := range c.Normalizers {
			n, err := newNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	default:
		return nil, fmt.Errorf("tokenizer: normalizer %q not supported", c.Type)
	}
}
