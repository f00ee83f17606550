package chat

import (
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// parseToolCalls returns the calls with JSON-string arguments replaced by
// their parsed value and empty or missing ones by {}, as vLLM does before
// rendering. The request's own values are not modified.
func parseToolCalls(in *jinja.List) (*jinja.List, error) {
	calls := jinja.NewList(make([]jinja.Value, len(in.Items))...)
	for i, c := range in.Items {
		orig, ok := c.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool call %d is not an object", i)
		}
		origFn, ok := get(orig, "function").(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool call %d has no function", i)
		}
		call, fn := jinja.NewDict(), jinja.NewDict()
		copyMissing(orig, call)
		copyMissing(origFn, fn)
		call.SetString("function", fn)
		calls.Items[i] = call
		fn.SetString("arguments", parseArguments(get(fn, "arguments")))
	}
	return calls, nil
}

// parseArguments is vLLM's reading of tool call arguments: a non-empty
// dict as is, a JSON string parsed, anything else (or a string that is
// not a JSON object) {}.
func parseArguments(args jinja.Value) jinja.Value {
	switch a := args.(type) {
	case *jinja.Dict:
		if a.Len() > 0 {
			return a
		}
	case string:
		if v, err := jinja.FromJSON([]byte(a)); err == nil {
			if d, ok := v.(*jinja.Dict); ok {
				return d
			}
		}
	}
	return jinja.NewDict()
}

// dumpTools renders tools as vLLM's pydantic models dump them: type
// "function" and function with name, description and parameters (null when
// absent), and strict and defer_loading when set.
func dumpTools(tools *jinja.List) *jinja.List {
	out := make([]jinja.Value, len(tools.Items))
	for i, t := range tools.Items {
		td, ok := t.(*jinja.Dict)
		if !ok {
			out[i] = t
			continue
		}
		fn := jinja.NewDict()
		src, _ := get(td, "function").(*jinja.Dict)
		if src == nil {
			src = jinja.NewDict()
		}
		for _, k := range []string{"name", "description", "parameters"} {
			fn.SetString(k, get(src, k))
		}
		for _, k := range []string{"strict", "defer_loading"} { // dumped when set
			if v := get(src, k); v != nil {
				fn.SetString(k, v)
			}
		}
		d := jinja.NewDict()
		d.SetString("type", "function")
		d.SetString("function", fn)
		out[i] = d
	}
	return jinja.NewList(out...)
}

// copyMissing copies the keys of src that dst lacks.
func copyMissing(src, dst *jinja.Dict) {
	if src == nil {
		return
	}
	for i, k := range src.Keys() {
		if _, ok := dst.Get(k); !ok {
			_ = dst.Set(k, src.Values()[i])
		}
	}
}

// consolidateSystem is what vLLM does to a conversation with developer
// messages: they become system messages, and several system messages (or
// one not first) merge into one first message, joined by blank lines.
func consolidateSystem(conv []jinja.Value) []jinja.Value {
	var texts []string
	var rest []jinja.Value
	merge := false
	for i, m := range conv {
		d := m.(*jinja.Dict)
		if role, _ := get(d, "role").(string); role == "developer" {
			d.SetString("role", "system")
		} else if role != "system" {
			rest = append(rest, d)
			continue
		}
		merge = merge || i > 0 || len(texts) > 0
		if t := systemText(get(d, "content")); t != "" {
			texts = append(texts, t)
		}
	}
	if !merge {
		return conv
	}
	sys := jinja.NewDict()
	sys.SetString("role", "system")
	sys.SetString("content", strings.Join(texts, "\n\n"))
	return append([]jinja.Value{sys}, rest...)
}

func systemText(content jinja.Value) string {
	l, ok := content.(*jinja.List)
	if !ok {
		s, _ := content.(string)
		return s
	}
	var parts []string
	for _, p := range l.Items {
		if d, ok := p.(*jinja.Dict); ok {
			if t, ok := get(d, "text").(string); ok {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n")
}
