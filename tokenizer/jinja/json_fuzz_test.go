package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// fromJSONReference is FromJSON written over encoding/json's token stream:
// slower, and the reference FuzzFromJSON holds the decoder to.
func fromJSONReference(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONReference(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func decodeJSONReference(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, ErrLimit
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			l := &List{}
			for dec.More() {
				v, err := decodeJSONReference(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			_, err := dec.Token()
			return l, err
		}
		if t != '{' {
			return nil, errors.New("unexpected delimiter")
		}
		d := NewDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeJSONReference(dec, depth+1)
			if err != nil {
				return nil, err
			}
			d.SetString(k.(string), v)
		}
		_, err := dec.Token()
		return d, err
	case json.Number:
		return jsonNumber(string(t))
	}
	return tok, nil // nil, bool, string
}

func FuzzFromJSON(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi \u00e9 \ud83d\ude00 \ud800 \u0041\"\\\/\b\f\n\r\t"}],"n":-0,"x":1.5e3,"y":[true,false,null]}`,
		`[1, 2 , 3]`, ` "plain" `, `{"a":1,"a":2,"b":{}}`, `[[[[]]]]`, `-12.5E-3`, `1e400`, `99999999999999999999`,
		`{"a" 1}`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `"\x"`, "\"tab\there\"", "\"\xff\xfe\"", `"\ud83d\u0041"`,
		`{"k":"v"} x`, `[`, `{"`, `nul`, `tru`, `"\u12"`, `[1 2]`, `{"a":[1,{"b":[2,{"c":3}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := FromJSON(data)
		want, refErr := fromJSONReference(data)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("FromJSON(%q): err %v, encoding/json: %v", data, err, refErr)
		}
		if err != nil {
			return
		}
		if !equal(got, want) {
			t.Fatalf("FromJSON(%q) = %#v, encoding/json reads %#v", data, got, want)
		}
		if a, b := repr(got), repr(want); a != b {
			t.Fatalf("FromJSON(%q) prints %s, encoding/json's %s", data, a, b)
		}
	})
}

// BenchmarkFromJSON decodes a chat request of 10 messages (36 KB).
//
// Dicts of up to eight keys without a hash index (old and new run
// alternately twice, load ≈ 5, 2026-11-22):
//
//	BenchmarkFromJSON-2  old 48128 B/op  228 allocs/op
//	                     new 44544 B/op  166 allocs/op
//
// Over internal/jsonlex with the keys and roles chat requests repeat
// interned (old and new alternately four times, 2 shared vCPUs, load ≈ 3.6,
// 2026-11-24):
//
//	BenchmarkFromJSON-2  old 65–73 µs  44544 B/op  166 allocs/op
//	                     new 34–39 µs  43696 B/op   88 allocs/op
func BenchmarkFromJSON(b *testing.B) {
	var msgs []string
	for i := range 10 {
		msgs = append(msgs, `{"role":"user","content":"`+string(bytes.Repeat([]byte("routing every request to the pod that caches its prefix "), 60+i))+`"}`)
	}
	body := []byte(`{"model":"qwen3","messages":[` + string(bytes.Join(func() [][]byte {
		out := make([][]byte, len(msgs))
		for i, m := range msgs {
			out[i] = []byte(m)
		}
		return out
	}(), []byte(","))) + `],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}
