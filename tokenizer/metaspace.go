package tokenizer

import (
	"fmt"
	"strings"
)

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement
// character, which is prepended as the scheme says; with split, every
// replacement starts a new piece.
type metaspace struct {
	replacement string
	prepend     string // "always", "first" or "never"
}

func newMetaspace(c *componentJSON) (step, error) {
	if len([]rune(c.Replacement)) != 1 {
		return step{}, fmt.Errorf("tokenizer: pre_tokenizer Metaspace: replacement %q is not one character", c.Replacement)
	}
	m := &metaspace{replacement: c.Replacement, prepend: c.PrependScheme}
	if m.prepend == "" {
		m.prepend = "never"
		if c.AddPrefixSpace {
			m.prepend = "always"
		}
	}
	switch m.prepend {
	case "always", "first", "never":
	default:
		return step{}, fmt.Errorf("tokenizer: pre_tokenizer Metaspace: prepend_scheme %q not supported", m.prepend)
	}
	st := step{meta: m}
	if c.Split == nil || *c.Split {
		st.m, st.behavior = literal(m.replacement), mergedWithNext
	}
	return st, nil
}

// transform applies the steps that rewrite a piece rather than split it:
// ByteLevel's add_prefix_space and Metaspace's replacement.
func (st *step) transform(s string, first bool) string {
	switch {
	case st.prefixSpace:
		if !strings.HasPrefix(s, " ") {
			s = " " + s
		}
	case st.meta != nil:
		m := st.meta
		s = strings.ReplaceAll(s, " ", m.replacement)
		if (m.prepend == "always" || m.prepend == "first" && first) && !strings.HasPrefix(s, m.replacement) {
			s = m.replacement + s
		}
	}
	return s
}
