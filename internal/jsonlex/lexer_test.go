package jsonlex

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// documents are whole JSON texts, valid and not; every test that compares
// with encoding/json runs over them, and they seed FuzzLexer.
var documents = []string{
	`{}`, ` { "a" : 1 } `, `{"a":"x\u00e9\ud83d\ude00\n\"","b":[1,-2.5e+3,true,false,null,{"c":[]}]}`,
	`{"model":"m","prompt":"hi","model":"last"}`, `{"a":"\ud800"}`, `{"a":"\udc00\ud800x"}`, `{"a":01}`,
	`{"a":1,}`, `{"a"}`, `[1,2]`, `{"a":"\x01"}`, `{"a":1} {}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
	`{"a":tru}`, `{"a":"\q"}`, `{"a":"\u12"}`, "{\"a\":\"caf\xc3\xa9\"}", "{\"a\":\"\xff\"}", `{"a":[1,[2,[3]]]}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001), strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	`"plain"`, ` 0 `, `-0.0e-0`, `1E+2`, `.5`, `+1`, `00`, `nul`, `true false`, `[`, `{"`, `{"a":`, `[1 2]`, `[,]`, `[1,]`,
	`{,}`, `{"a":1 "b":2}`, `{"a" 1}`, `{1:2}`, "\"tab\there\"", "\"\xff\xfe\"", `"\ud83d\u0041"`, `"\ud83d\u12"`,
	"[\"\xed\xa0\x80\"]", "\"a\\\xff\"", "\x00", "[1]\x00", "\f[]", `"\/\b\f\n\r\t\\\""`, `"\u0000\u001f\u00FF\uFFFF"`,
	"\"\xc3\"", "\"\xe2\x82\"", "\"\xe2\x82\\n\"", "\"\xf0\x9f\x98\x80\"", `[true,false,null,"",{},[]]`, "",
}

// decode reads the document into what encoding/json's Decoder with
// UseNumber gives: map[string]any (the last of repeated keys wins), []any,
// string, json.Number, bool or nil.
func decode(l *Lexer) (any, error) {
	switch l.Peek() {
	case Object:
		m := map[string]any{}
		err := l.Object(func(key []byte) error {
			k := string(key)
			v, err := decode(l)
			m[k] = v
			return err
		})
		return m, err
	case Array:
		a := []any{}
		err := l.Array(func() error {
			v, err := decode(l)
			a = append(a, v)
			return err
		})
		return a, err
	case String:
		return l.Str()
	case Number:
		n, err := l.Number()
		return json.Number(n), err
	case Bool:
		return l.Bool()
	case Null:
		return nil, l.Null()
	}
	return nil, l.Skip()
}

func decodeAll(data []byte, o Options) (any, error) {
	l := New(data, o)
	v, err := decode(l)
	if err == nil {
		err = l.End()
	}
	return v, err
}

func reference(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

// checkDocument holds the lexer to encoding/json on one document: the
// same verdict, the same values (strings unescaped and replaced alike), and
// with RejectInvalid the verdict of a reader that checks UTF-8 first.
func checkDocument(t *testing.T, data []byte) {
	t.Helper()
	want, werr := reference(data)
	got, gerr := decodeAll(data, Options{})
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("decode(%q) = %v, encoding/json says %v", data, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decode(%q) = %#v, want %#v", data, got, want)
	}
	if err := New(data, Options{}).Skip(); gerr == nil && err != nil {
		t.Fatalf("Skip(%q) = %v, want nil", data, err)
	}
	_, rerr := decodeAll(data, Options{InvalidUTF8: RejectInvalid})
	if wantOK := werr == nil && utf8.Valid(data); (rerr == nil) != wantOK {
		t.Fatalf("decode(%q) rejecting invalid UTF-8 = %v, want success %v", data, rerr, wantOK)
	}
	skipper := New(data, Options{InvalidUTF8: RejectInvalid})
	serr := skipper.Skip()
	if serr == nil {
		serr = skipper.End()
	}
	if (serr == nil) != (rerr == nil) {
		t.Fatalf("Skip(%q) rejecting invalid UTF-8 = %v, decode %v", data, serr, rerr)
	}
}

func TestMatchesEncodingJSON(t *testing.T) {
	for _, d := range documents {
		checkDocument(t, []byte(d))
	}
}

// Strings of every length up to three words with a special byte (quote,
// backslash, control character, high byte) at every offset: the word-wise
// scan must stop exactly where a byte loop would.
func TestStringWordBoundaries(t *testing.T) {
	for n := range 26 {
		for at := range n {
			for _, c := range []string{`\"`, `\\`, `\n`, "\x01", "\x1f", " ", "\x7f", "\xc3\xa9", "\xff", `\u00e9`} {
				b := []byte(`{"k":"` + strings.Repeat("a", at) + c + strings.Repeat("b", n-at) + `"}`)
				checkDocument(t, b)
				checkDocument(t, b[:len(b)-2]) // unterminated
			}
		}
	}
}

func FuzzLexer(f *testing.F) {
	for _, d := range documents {
		f.Add([]byte(d))
	}
	for _, tt := range stringTests {
		f.Add([]byte(tt.in))
	}
	for _, tt := range numberTests {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(checkDocument)
}
