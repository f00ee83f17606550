package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads the large parts of tokenizer.json (the vocabulary and
// merges, millions of values) much faster than encoding/json would.
type jsonScanner struct {
	data []byte
	pos  int
}

var errJSON = errors.New("malformed JSON")

func (s *jsonScanner) fail(what string) error {
	return fmt.Errorf("tokenizer: tokenizer.json offset %d: %s: %w", s.pos, what, errJSON)
}

// ws skips whitespace (and any other control byte, which valid JSON only
// has inside strings).
func (s *jsonScanner) ws() {
	for s.pos < len(s.data) && s.data[s.pos] <= ' ' {
		s.pos++
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		return s.fail(fmt.Sprintf("want %q", c))
	}
	s.pos++
	return nil
}

// str reads a string. Invalid UTF-8 and lone surrogates become U+FFFD, as
// with encoding/json.
func (s *jsonScanner) str() (string, error) {
	b, err := s.strBytes()
	return string(b), err
}

// strBytes is str returning bytes that alias the input when the string
// holds no escapes or invalid UTF-8.
func (s *jsonScanner) strBytes() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	ascii := true
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c == '"' {
			raw := s.data[start:s.pos]
			s.pos++
			if ascii || utf8.Valid(raw) {
				return raw, nil
			}
			return []byte(string([]rune(string(raw)))), nil
		}
		if c == '\\' {
			s.pos = start
			str, err := s.escaped()
			return []byte(str), err
		}
		ascii = ascii && c < utf8.RuneSelf
		s.pos++
	}
	return nil, s.fail("unterminated string")
}

// escaped reads the rest of a string holding escapes, from its first byte.
func (s *jsonScanner) escaped() (string, error) {
	var out []byte
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		s.pos++
		switch {
		case c == '"':
			return string([]rune(string(out))), nil
		case c != '\\':
			out = append(out, c)
		case s.pos >= len(s.data):
			return "", s.fail("bad escape")
		default:
			e := s.data[s.pos]
			s.pos++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, err := s.unicodeEscape()
				if err != nil {
					return "", err
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", s.fail("bad escape")
			}
		}
	}
	return "", s.fail("unterminated string")
}

// unicodeEscape reads XXXX after \u, and a low surrogate escape after a
// high one.
func (s *jsonScanner) unicodeEscape() (rune, error) {
	hex4 := func() (rune, bool) {
		if s.pos+4 > len(s.data) {
			return 0, false
		}
		v, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 16)
		if err != nil {
			return 0, false
		}
		s.pos += 4
		return rune(v), true
	}
	r, ok := hex4()
	if !ok {
		return 0, s.fail("bad \\u escape")
	}
	if !utf16.IsSurrogate(r) {
		return r, nil
	}
	save := s.pos
	if s.pos+2 <= len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
		s.pos += 2
		if r2, ok := hex4(); ok {
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, nil
			}
		}
	}
	s.pos = save
	return utf8.RuneError, nil
}

// integer reads a non-negative integer.
func (s *jsonScanner) integer() (int, error) {
	s.ws()
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	v, err := strconv.Atoi(string(s.data[start:s.pos]))
	if err != nil || v > maxTokenID {
		return 0, s.fail("want a token id")
	}
	return v, nil
}

// skip passes over one value of any kind.
func (s *jsonScanner) skip() error {
	depth := 0
	for {
		switch c := s.peek(); c {
		case 0:
			return s.fail("unexpected end")
		case '"':
			if _, err := s.str(); err != nil {
				return err
			}
		case '{', '[':
			depth++
			s.pos++
		case '}', ']':
			depth--
			s.pos++
		case ',', ':':
			s.pos++
			continue
		default:
			for s.pos < len(s.data) && !isDelim(s.data[s.pos]) {
				s.pos++
			}
		}
		if depth <= 0 {
			return nil
		}
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', ':', '}', ']', ' ', '\t', '\n', '\r', '"', '{', '[':
		return true
	}
	return false
}

// object calls field for every member of an object; field must consume
// the value.
func (s *jsonScanner) object(field func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.fail("want , or }")
		}
	}
}

// array calls elem for every element of an array; elem must consume it.
func (s *jsonScanner) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.fail("want , or ]")
		}
	}
}

// raw returns the bytes of the next value.
func (s *jsonScanner) raw() ([]byte, error) {
	s.ws()
	start := s.pos
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.data[start:s.pos], nil
}
