package jinja

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fuzzLimits keep every fuzz input cheap.
func fuzzLimits() Limits {
	return Limits{MaxOutput: 1 << 16, MaxIterations: 1 << 12, MaxCallDepth: 40, MaxNesting: 60, MaxSource: 1 << 14}
}

func fuzzContext() map[string]Value {
	v, _ := FromJSON([]byte(`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]},
		{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
		"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "x": 1.5, "n": null}`))
	ctx := map[string]Value{"add_generation_prompt": true, "bos_token": "<s>"}
	d := v.(*Dict)
	for i, k := range d.Keys() {
		ctx[k.(string)] = d.Values()[i]
	}
	return ctx
}

// checkRender compiles and renders src and fails on a panic or a broken
// limit.
func checkRender(t *testing.T, src string) {
	lim := fuzzLimits()
	tp, err := CompileWithLimits(src, lim)
	if errors.Is(err, errInternal) {
		t.Fatalf("Compile(%q) panicked: %v", src, err)
	}
	if err != nil {
		return
	}
	out, err := tp.RenderWith(fuzzContext(), RenderOptions{Now: func() time.Time { return oracleNow }})
	if errors.Is(err, errInternal) {
		t.Fatalf("Render(%q) panicked: %v", src, err)
	}
	if len(out) > lim.MaxOutput {
		t.Fatalf("Render(%q) = %d bytes, limit %d", src, len(out), lim.MaxOutput)
	}
}

// FuzzRender mutates template sources, seeded from the feature cases.
func FuzzRender(f *testing.F) {
	for _, c := range featureCases {
		f.Add(c.tmpl)
	}
	f.Fuzz(func(t *testing.T, src string) { checkRender(t, src) })
}

// fragments are the pieces FuzzGenerated assembles templates from.
var fragments = []string{
	"{% if ", "{% elif ", "{% else %}", "{% endif %}", "{% for x in ", "{% endfor %}", "{% set y = ",
	"{% macro m(a, b=1) %}", "{% endmacro %}", "{{ m(", "{{ ", " }}", " %}", "{%- ", " -%}", "{# c #}",
	"messages", "message", "x", "y", "n", "tools", "loop.index", "loop.previtem", "range(50)",
	" + ", " - ", " * ", " // ", " % ", " ** ", " ~ ", " and ", " or ", "not ", " in ", " is defined", " is string",
	"|tojson", "|length", "|join(',')", "|items", "|map(attribute='role')", "|selectattr('role')", "|list", "|string",
	"[", "]", "(", ")", "{", "}", ",", ":", "[::-1]", "[1:]", ".content", "['role']",
	"'a'", "\"b\"", "1", "2.5", "none", "true", "namespace(v=1)", "raise_exception('e')",
	"{% break %}", "{% continue %}", "\n", "  ", "text",
}

// FuzzGenerated builds templates from fragments chosen by the fuzz bytes,
// so most inputs parse and reach the evaluator.
func FuzzGenerated(f *testing.F) {
	f.Add([]byte{0, 16, 12, 5, 13, 2, 3})
	f.Add([]byte{4, 24, 13, 12, 16, 13, 5})
	f.Add([]byte{7, 17, 13, 12, 9, 14, 17, 13, 8, 9, 18, 13})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b strings.Builder
		for _, c := range data {
			b.WriteString(fragments[int(c)%len(fragments)])
		}
		checkRender(t, b.String())
	})
}

func TestLimits(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxOutput = 1 << 20
	lim.MaxIterations = 1 << 16
	for _, src := range append(limitCases, shareCases[:2]...) {
		tp, err := CompileWithLimits(src, lim)
		if err == nil {
			_, err = tp.Render(nil)
		}
		if !errors.Is(err, ErrLimit) {
			t.Errorf("Render(%.60q) = %v, want ErrLimit", src, err)
		}
	}
}
