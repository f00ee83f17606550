package router

import "github.com/kvrouter/kvrouter/internal/jsonlex"

// Request bodies are read with jsonlex, the one JSON lexer: these helpers
// hand out each top-level value as raw bytes.

// scanObject calls fn with each key and raw value of the JSON object that is
// the whole of data, in order. It fails on anything but one valid object.
func scanObject(data []byte, fn func(key string, value []byte) error) error {
	lx := jsonlex.New(data, jsonlex.Options{})
	err := lx.Object(func(key []byte) error {
		k := string(key)
		v, err := lx.Raw()
		if err != nil {
			return err
		}
		return fn(k, v)
	})
	if err == nil {
		err = lx.End()
	}
	return err
}

// scanArray calls fn with each raw element of the JSON array that is the
// whole of data.
func scanArray(data []byte, fn func(elem []byte) error) error {
	lx := jsonlex.New(data, jsonlex.Options{})
	err := lx.Array(func() error {
		v, err := lx.Raw()
		if err != nil {
			return err
		}
		return fn(v)
	})
	if err == nil {
		err = lx.End()
	}
	return err
}

// unquote decodes a string token the lexer accepted, as encoding/json
// does: invalid UTF-8 and lone surrogates become U+FFFD.
func unquote(tok []byte) string {
	s, _ := jsonlex.New(tok, jsonlex.Options{}).Str()
	return s
}
