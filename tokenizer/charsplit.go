package tokenizer

import "github.com/kvrouter/kvrouter/tokenizer/internal/unicode16"

// charClass matches every single character with one of its properties, or,
// with ascii set, any ASCII punctuation character: the Digits and
// Punctuation pre-tokenizers split on such characters.
type charClass struct {
	props unicode16.Prop
	ascii bool // also ASCII punctuation (Rust's char::is_ascii_punctuation)
}

func (c charClass) matches(s string, sink matchSink) {
	for i := 0; i < len(s); {
		_, n, p := at(s, i)
		if p&c.props != 0 || c.ascii && n == 1 && isASCIIPunct(s[i]) {
			sink.match(i, i+n)
		}
		i += n
	}
}

// newDigits is the Digits pre-tokenizer: numeric characters (Unicode N)
// each on their own, or runs of them together.
func newDigits(c *componentJSON) step {
	if c.IndividualDigits {
		return step{m: charClass{props: unicode16.PropN}, behavior: isolated}
	}
	return step{m: charClass{props: unicode16.PropN}, behavior: contiguous}
}

// newPunctuation is the Punctuation pre-tokenizer: punctuation characters
// (Unicode P, and ASCII punctuation) split off with the given behavior,
// Isolated by default.
func newPunctuation(c *componentJSON) (step, error) {
	b := isolated
	if c.Behavior != "" {
		var ok bool
		if b, ok = behaviors[c.Behavior]; !ok {
			return step{}, errBehavior(c.Behavior)
		}
	}
	return step{m: charClass{props: unicode16.PropP, ascii: true}, behavior: b}, nil
}
