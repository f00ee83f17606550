package jsonlex

import (
	"errors"
	"io"
	"strings"
	"testing"
)

const fffd = "\uFFFD"

var stringTests = []struct {
	in      string
	want    string // with ReplaceInvalid
	wantErr error  // nil: success; errAny: any error
	reject  error  // with RejectInvalid, when it differs from wantErr
}{
	{in: `"plain"`, want: "plain"},
	{in: `""`, want: ""},
	{in: `"\"\\\/\b\f\n\r\t"`, want: "\"\\/\b\f\n\r\t"},
	{in: `"\u00e9\u00E9"`, want: "éé"},
	{in: `"\ud83d\ude00"`, want: "😀"},
	{in: `"\ud800"`, want: fffd},                         // a lone high surrogate
	{in: `"\udc00\ud800x"`, want: fffd + fffd + "x"},     // low before high: two lone halves
	{in: `"\ud83d\u0041"`, want: fffd + "A"},             // the second escape reads on its own
	{in: `"\ud83d\\"`, want: fffd + "\\"},                // as does another escape
	{in: `"\ud83d\ud83d\ude00"`, want: fffd + "😀"},       // high, then a pair
	{in: "\"caf\xc3\xa9\"", want: "café"},                // valid UTF-8 is kept
	{in: "\"\xff\"", want: fffd, reject: ErrInvalidUTF8}, // invalid bytes: one U+FFFD each
	{in: "\"a\xed\xa0\x80b\"", want: "a" + fffd + fffd + fffd + "b", reject: ErrInvalidUTF8},
	{in: "\"\xe2\x82\\n\"", want: fffd + fffd + "\n", reject: ErrInvalidUTF8},
	{in: "\"\xf0\x9f\x98\x80\\u00e9\"", want: "😀é"},
	{in: `"\q"`, wantErr: errAny},
	{in: `"\u12"`, wantErr: errAny},
	{in: `"\ud83d\u12"`, wantErr: errAny},
	{in: "\"a\x01\"", wantErr: errAny},
	{in: "\"a\x7f\"", want: "a\x7f"},
	{in: `"abc`, wantErr: io.ErrUnexpectedEOF},
	{in: `"abc\`, wantErr: io.ErrUnexpectedEOF},
	{in: `"\u00`, wantErr: io.ErrUnexpectedEOF},
	{in: `abc`, wantErr: errAny},
}

var errAny = errors.New("any error")

func TestStr(t *testing.T) {
	for _, tt := range stringTests {
		for _, mode := range []InvalidUTF8{ReplaceInvalid, RejectInvalid} {
			wantErr := tt.wantErr
			if mode == RejectInvalid && tt.reject != nil {
				wantErr = tt.reject
			}
			got, err := New([]byte(tt.in), Options{InvalidUTF8: mode}).Str()
			switch {
			case wantErr == nil && (err != nil || got != tt.want):
				t.Errorf("Str(%q) mode %d = %q, %v, want %q", tt.in, mode, got, err, tt.want)
			case wantErr == errAny && err == nil: //nolint:errorlint // errAny is a marker
				t.Errorf("Str(%q) mode %d = %q, want an error", tt.in, mode, got)
			case wantErr != nil && wantErr != errAny && !errors.Is(err, wantErr): //nolint:errorlint // errAny is a marker
				t.Errorf("Str(%q) mode %d = %q, %v, want %v", tt.in, mode, got, err, wantErr)
			}
			if skipErr := New([]byte(tt.in), Options{InvalidUTF8: mode}).Skip(); (skipErr == nil) != (wantErr == nil) {
				t.Errorf("Skip(%q) mode %d = %v, want an error %v", tt.in, mode, skipErr, wantErr != nil)
			}
		}
	}
}

var numberTests = []struct {
	in, want string // want "": an error
}{
	{"0", "0"},
	{"-0", "-0"},
	{"12", "12"},
	{"-12.50", "-12.50"},
	{"1e5", "1e5"},
	{"1E+5", "1E+5"},
	{"2.5e-3", "2.5e-3"},
	{"12,", "12"},
	{"0]", "0"},
	{"-", ""},
	{"1.", ""},
	{"1e", ""},
	{"1e+", ""},
	{".5", ""},
	{"+1", ""},
	{"-a", ""},
	{"01", "0"}, // the 1 is left for the caller, whose grammar refuses it
}

func TestNumber(t *testing.T) {
	for _, tt := range numberTests {
		got, err := New([]byte(tt.in), Options{}).Number()
		if string(got) != tt.want || (err == nil) != (tt.want != "") {
			t.Errorf("Number(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestDepth(t *testing.T) {
	for _, tt := range []struct {
		max, depth int
		wantErr    bool
	}{
		{0, 10000, false}, {0, 10001, true}, {3, 3, false}, {3, 4, true}, {1, 1, false},
	} {
		for _, open := range []string{"[", `{"a":`} {
			closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
			doc := strings.Repeat(open, tt.depth) + "1" + strings.Repeat(closing, tt.depth)
			err := New([]byte(doc), Options{MaxDepth: tt.max}).Skip()
			if (err != nil) != tt.wantErr {
				t.Errorf("Skip(%.10s... %d deep) with MaxDepth %d = %v, want an error %v", doc, tt.depth, tt.max, err, tt.wantErr)
			}
		}
	}
}

// TestWalk reads members and elements with their positions and depths.
func TestWalk(t *testing.T) {
	l := New([]byte(` {"a" : [1, "x"], "b\u0021": {"c": null}, "a": true} `), Options{})
	var got []string
	err := l.Object(func(key []byte) error {
		got = append(got, string(key)+"@"+itoa(l.Pos())+"/"+itoa(l.Depth()))
		switch l.Peek() {
		case Array:
			return l.Array(func() error {
				raw, err := l.Raw()
				got = append(got, string(raw)+"/"+itoa(l.Depth()))
				return err
			})
		case Object:
			raw, err := l.Raw()
			got = append(got, string(raw))
			return err
		}
		return l.Skip()
	})
	want := `a@8/1 1/2 "x"/2 b!@29/1 {"c": null} a@47/1`
	if g := strings.Join(got, " "); err != nil || g != want || l.End() != nil || l.Depth() != 0 {
		t.Errorf("Object(...) = %q, %v, want %q", g, err, want)
	}
	stop := errors.New("stop")
	if err := New([]byte(`[1,2]`), Options{}).Array(func() error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Array(fn failing) = %v, want fn's error", err)
	}
}

func TestErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"a":1,}`, "jsonlex: offset 7: want an object key"},
		{`[1 2]`, "jsonlex: offset 3: want , or ] after an array element"},
		{`{"a" 1}`, "jsonlex: offset 5: want : after an object key"},
		{`[1] x`, "jsonlex: offset 4: data after the top-level value"},
		{`[1,`, "jsonlex: offset 3: unexpected end of input"},
		{`@`, "jsonlex: offset 0: invalid character '@' looking for a value"},
		{`"\x"`, `jsonlex: offset 1: invalid escape in a string`},
	} {
		l := New([]byte(tt.in), Options{})
		err := l.Skip()
		if err == nil {
			err = l.End()
		}
		if err == nil || err.Error() != tt.want {
			t.Errorf("Skip(%q) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
