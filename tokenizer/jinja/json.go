package jinja

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
)

// maxJSONDepth bounds the nesting FromJSON accepts.
const maxJSONDepth = 256

// FromJSON decodes JSON into a Value as Python's json.loads does: objects
// become *Dict with their key order (a repeated key keeps its first place
// and its last value), integers int64, other numbers float64. Invalid UTF-8
// in strings becomes U+FFFD, as encoding/json does.
func FromJSON(data []byte) (Value, error) {
	lx := jsonlex.New(data, jsonlex.Options{})
	v, err := DecodeJSON(lx)
	if err == nil {
		err = lx.End()
	}
	if err != nil {
		return nil, fmt.Errorf("jinja: json: %w", err)
	}
	return v, nil
}

// DecodeJSON reads the value lx is at into a Value as FromJSON does, and
// leaves lx after it: a reader walking a document with lx decodes the
// parts it wants without reading them twice.
//
// Values beyond jinja's limits (nested deeper than 256 in the document, or
// an integer outside int64) give an error wrapping ErrLimit, but only once
// the whole value is read: those parts read as nil (too deep) or float64
// (too big), so that the caller can go on with the rest of the document
// and still tell an array from a string. Any other error is lx's
// *jsonlex.SyntaxError.
func DecodeJSON(lx *jsonlex.Lexer) (Value, error) {
	var limit error // apart from d, so that lx does not flow to the result
	d := jsonDecoder{lx: lx, limit: &limit}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	return v, limit
}

// jsonDecoder reads JSON straight into Values: the chat request of every
// routed chat completion goes through it.
type jsonDecoder struct {
	lx    *jsonlex.Lexer
	limit *error // the first value beyond the limits
}

func (d *jsonDecoder) value() (Value, error) {
	lx := d.lx
	if lx.Depth() > maxJSONDepth {
		d.overLimit(fmt.Errorf("%w: JSON nested deeper than %d", ErrLimit, maxJSONDepth))
		return nil, lx.Skip()
	}
	switch lx.Peek() {
	case jsonlex.Object:
		return d.object()
	case jsonlex.Array:
		return d.array()
	case jsonlex.String:
		s, err := lx.StrBytes()
		if err != nil {
			return nil, err
		}
		return internJSON(s), nil
	case jsonlex.Number:
		return d.number()
	case jsonlex.Bool:
		return lx.Bool()
	case jsonlex.Null:
		return nil, lx.Null()
	}
	return nil, lx.Skip() // fails, saying why
}

func (d *jsonDecoder) overLimit(err error) {
	if *d.limit == nil {
		*d.limit = err
	}
}

func (d *jsonDecoder) object() (Value, error) {
	obj := NewDict()
	err := d.lx.Object(func(key []byte) error {
		k := internJSON(key)
		v, err := d.value()
		if err != nil {
			return err
		}
		_ = obj.Set(k, v) // a string key always hashes
		return nil
	})
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func (d *jsonDecoder) array() (Value, error) {
	l := &List{}
	err := d.lx.Array(func() error {
		v, err := d.value()
		l.Items = append(l.Items, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (d *jsonDecoder) number() (Value, error) {
	tok, err := d.lx.Number()
	if err != nil {
		return nil, err
	}
	v, err := jsonNumber(string(tok))
	if err != nil { // an integer outside int64: Python's would be exact
		d.overLimit(err)
		f, _ := strconv.ParseFloat(string(tok), 64)
		return f, nil
	}
	return v, nil
}

// jsonNumber is a JSON number as Python's json.loads reads it: int when
// it has no fraction or exponent (an error wrapping ErrLimit outside
// int64), else float.
func jsonNumber(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		return nil, fmt.Errorf("%w: integer %s out of range", ErrLimit, s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, err
	}
	return f, nil
}

// internJSON returns a JSON string as a Value, without allocating for the
// keys and values chat requests repeat in every message and tool.
func internJSON(b []byte) Value {
	switch string(b) {
	case "":
		return ""
	case "role":
		return "role"
	case "content":
		return "content"
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	case "system":
		return "system"
	case "tool":
		return "tool"
	case "developer":
		return "developer"
	case "name":
		return "name"
	case "type":
		return "type"
	case "text":
		return "text"
	case "tool_calls":
		return "tool_calls"
	case "tool_call_id":
		return "tool_call_id"
	case "id":
		return "id"
	case "function":
		return "function"
	case "arguments":
		return "arguments"
	case "description":
		return "description"
	case "parameters":
		return "parameters"
	case "properties":
		return "properties"
	case "required":
		return "required"
	case "object":
		return "object"
	case "string":
		return "string"
	case "reasoning_content":
		return "reasoning_content"
	}
	return string(b)
}
