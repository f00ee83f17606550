package jsonlex

import "fmt"

// Skip passes over one value of any kind, checking it as the other reads
// would.
func (l *Lexer) Skip() error {
	l.space()
	if l.pos >= len(l.data) {
		return l.fail("")
	}
	switch c := l.data[l.pos]; kindOf[c] {
	case String:
		return l.skipString()
	case Object:
		return l.Object(func([]byte) error { return l.Skip() })
	case Array:
		return l.Array(l.Skip)
	case Number:
		_, err := l.Number()
		return err
	case Bool:
		_, err := l.Bool()
		return err
	case Null:
		return l.Null()
	default:
		return l.fail(fmt.Sprintf("invalid character %q looking for a value", c))
	}
}

// Raw passes over one value and returns its bytes in the input.
func (l *Lexer) Raw() ([]byte, error) {
	l.space()
	start := l.pos
	if err := l.Skip(); err != nil {
		return nil, err
	}
	return l.data[start:l.pos], nil
}

// Number reads a number and returns its text, which follows RFC 8259's
// grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func (l *Lexer) Number() ([]byte, error) {
	l.space()
	data, start := l.data, l.pos
	i := start
	digits := func() bool {
		j := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case !digits():
		return nil, l.failAt(i, "want a number")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if !digits() {
			return nil, l.failAt(i, "want a digit after the decimal point")
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if !digits() {
			return nil, l.failAt(i, "want a digit in the exponent")
		}
	}
	l.pos = i
	return data[start:i], nil
}

// Bool reads true or false.
func (l *Lexer) Bool() (bool, error) {
	switch {
	case l.literal("true"):
		return true, nil
	case l.literal("false"):
		return false, nil
	}
	return false, l.fail("want true or false")
}

// Null reads null.
func (l *Lexer) Null() error {
	if l.literal("null") {
		return nil
	}
	return l.fail("want null")
}

func (l *Lexer) literal(word string) bool {
	l.space()
	if len(l.data)-l.pos < len(word) || string(l.data[l.pos:l.pos+len(word)]) != word {
		return false
	}
	l.pos += len(word)
	return true
}
