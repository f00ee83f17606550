package jsonlex

import (
	"errors"
	"fmt"
	"io"
)

// DefaultMaxDepth is the nesting Options.MaxDepth 0 allows: encoding/json's
// limit.
const DefaultMaxDepth = 10000

// InvalidUTF8 says how a Lexer reads string bytes that are not UTF-8.
type InvalidUTF8 uint8

const (
	// ReplaceInvalid reads each byte that does not start a valid UTF-8
	// sequence as U+FFFD, as encoding/json does.
	ReplaceInvalid InvalidUTF8 = iota
	// RejectInvalid fails with ErrInvalidUTF8, as Python's json.loads does
	// on bytes (it decodes them as UTF-8 first).
	RejectInvalid
)

// Options are what may differ between the readers of JSON.
type Options struct {
	// MaxDepth bounds how many arrays and objects may be open at once;
	// 0 means DefaultMaxDepth.
	MaxDepth int
	// InvalidUTF8 says how strings holding invalid UTF-8 read.
	InvalidUTF8 InvalidUTF8
}

// Kind is the kind of the value a Lexer is at.
type Kind uint8

// The kinds of JSON values, and Invalid: the end of the input or a byte
// that starts no value.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

// ErrInvalidUTF8 is what a RejectInvalid Lexer's *SyntaxError wraps when a
// string is not UTF-8.
var ErrInvalidUTF8 = errors.New("jsonlex: invalid UTF-8 in a string")

// SyntaxError is a place where the input is not the JSON a reader wants.
type SyntaxError struct {
	// Offset is the byte offset of the problem in the input.
	Offset int
	// Msg says what is wrong.
	Msg string
	// cause is io.ErrUnexpectedEOF or ErrInvalidUTF8 when one is why.
	cause error
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jsonlex: offset %d: %s", e.Offset, e.Msg)
}

// Unwrap returns io.ErrUnexpectedEOF when the input ended early and
// ErrInvalidUTF8 when a string was not UTF-8.
func (e *SyntaxError) Unwrap() error { return e.cause }

// Lexer reads one JSON document. The zero Lexer reads an empty input; New
// or Reset gives it one.
type Lexer struct {
	data     []byte
	pos      int
	depth    int
	maxDepth int
	reject   bool   // RejectInvalid
	buf      []byte // unescaped values
	keyBuf   []byte // unescaped keys, apart: a key stays valid while its value is read
}

// New returns a Lexer at the start of data.
func New(data []byte, o Options) *Lexer {
	l := &Lexer{}
	l.Reset(data, o)
	return l
}

// Reset makes l read data from its start, keeping its scratch buffers.
func (l *Lexer) Reset(data []byte, o Options) {
	l.data, l.pos, l.depth = data, 0, 0
	l.maxDepth = o.MaxDepth
	if l.maxDepth <= 0 {
		l.maxDepth = DefaultMaxDepth
	}
	l.reject = o.InvalidUTF8 == RejectInvalid
}

// Fork returns a Lexer at l's position and depth, with buffers of its own,
// to read the same input again later.
func (l *Lexer) Fork() *Lexer {
	return &Lexer{data: l.data, pos: l.pos, depth: l.depth, maxDepth: l.maxDepth, reject: l.reject}
}

// Pos returns the offset of the next byte l reads.
func (l *Lexer) Pos() int { return l.pos }

// Depth returns how many arrays and objects are open around l's position.
func (l *Lexer) Depth() int { return l.depth }

// Errorf returns a *SyntaxError at l's position, for a reader's own rules.
func (l *Lexer) Errorf(format string, args ...any) error {
	return l.failAt(l.pos, fmt.Sprintf(format, args...))
}

func (l *Lexer) failAt(pos int, msg string) error {
	if pos >= len(l.data) {
		return &SyntaxError{Offset: len(l.data), Msg: "unexpected end of input", cause: io.ErrUnexpectedEOF}
	}
	return &SyntaxError{Offset: pos, Msg: msg}
}

func (l *Lexer) fail(msg string) error { return l.failAt(l.pos, msg) }

// space skips JSON whitespace.
func (l *Lexer) space() {
	data, i := l.data, l.pos
	for i < len(data) && isSpace[data[i]] {
		i++
	}
	l.pos = i
}

var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// Peek skips whitespace and returns the kind of the value there, judged
// by its first byte: Invalid at the end or at a byte no value starts with.
func (l *Lexer) Peek() Kind {
	l.space()
	if l.pos >= len(l.data) {
		return Invalid
	}
	return kindOf[l.data[l.pos]]
}

var kindOf = func() (k [256]Kind) {
	k['n'], k['t'], k['f'], k['"'], k['['], k['{'], k['-'] = Null, Bool, Bool, String, Array, Object, Number
	for c := '0'; c <= '9'; c++ {
		k[c] = Number
	}
	return k
}()

// End checks that only whitespace follows: a document is one value.
func (l *Lexer) End() error {
	l.space()
	if l.pos != len(l.data) {
		return l.fail("data after the top-level value")
	}
	return nil
}

// enter opens an array or object at l.pos.
func (l *Lexer) enter() error {
	if l.depth >= l.maxDepth {
		return l.fail(fmt.Sprintf("nested deeper than %d", l.maxDepth))
	}
	l.depth++
	l.pos++
	l.space()
	return nil
}

// Object reads an object, calling fn at each member with its key and l at
// the member's value, which fn must read (or Skip). The key is valid until
// the next key is read. An error from fn is returned as is.
func (l *Lexer) Object(fn func(key []byte) error) error {
	l.space()
	if l.pos >= len(l.data) || l.data[l.pos] != '{' {
		return l.fail("want an object")
	}
	if err := l.enter(); err != nil {
		return err
	}
	if l.pos < len(l.data) && l.data[l.pos] == '}' {
		l.pos++
		l.depth--
		return nil
	}
	for {
		if l.pos >= len(l.data) || l.data[l.pos] != '"' {
			return l.fail("want an object key")
		}
		key, err := l.str(&l.keyBuf)
		if err != nil {
			return err
		}
		l.space()
		if l.pos >= len(l.data) || l.data[l.pos] != ':' {
			return l.fail("want : after an object key")
		}
		l.pos++
		l.space()
		if err := fn(key); err != nil {
			return err
		}
		if done, err := l.next('}'); done || err != nil {
			return err
		}
	}
}

// Array reads an array, calling fn at each element, which fn must read
// (or Skip). An error from fn is returned as is.
func (l *Lexer) Array(fn func() error) error {
	l.space()
	if l.pos >= len(l.data) || l.data[l.pos] != '[' {
		return l.fail("want an array")
	}
	if err := l.enter(); err != nil {
		return err
	}
	if l.pos < len(l.data) && l.data[l.pos] == ']' {
		l.pos++
		l.depth--
		return nil
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		if done, err := l.next(']'); done || err != nil {
			return err
		}
	}
}

// next reads what follows a member or element: a comma (and the space
// after it), or the closing byte, which it reports as done.
func (l *Lexer) next(closing byte) (done bool, err error) {
	l.space()
	if l.pos < len(l.data) {
		switch l.data[l.pos] {
		case ',':
			l.pos++
			l.space()
			return false, nil
		case closing:
			l.pos++
			l.depth--
			return true, nil
		}
	}
	if closing == '}' {
		return false, l.fail("want , or } after an object member")
	}
	return false, l.fail("want , or ] after an array element")
}
