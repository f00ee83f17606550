package jinja

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// errorCases fail inside a + or ~ chain or a method call. jinja2 folds
// a + b + c as (a + b) + c: the first failing step raises and later
// operands are never evaluated (raise_exception there would change the
// error).
var errorCases = []string{
	"{{ 'a' + 1 + raise_exception('late') }}",
	"{{ 'a' + 'b' + none + raise_exception('late') }}",
	"{{ 'a' + nope + raise_exception('late') }}",
	"{{ 'a' + 'b' + raise_exception('mid') + 1 }}",
	"{{ 1 + 2 + 'a' + raise_exception('late') }}",
	"{{ [1] + 'a' + raise_exception('late') }}",
	"{{ nope + 'a' + raise_exception('late') }}",
	"{% set x = 'a' + 'b' + 2 + raise_exception('late') %}",
	"{{ 'a' ~ nope.x ~ raise_exception('late') }}",
	"{{ 'a' ~ raise_exception('mid') ~ nope.x }}",
	"{% set x = 'a' ~ 'b' ~ raise_exception('mid') %}",
	"{{ 'a' + ('b' ~ raise_exception('inner')) + 1 }}",
	"{{ nope.strip(raise_exception('late')) }}",
	"{{ nope.x.strip() }}",
	"{{ 'a'.strip(raise_exception('arg')) }}",
	"{{ 'a'.nope(raise_exception('late')) }}",
	"{{ 'a'.__class__(raise_exception('late')) }}",
	"{{ 'a'.split(1) }}",
	"{{ 'a'.startswith(raise_exception('arg'), nope.x) }}",
}

// TestErrorsAgainstJinja2 checks that the errorCases fail with jinja2's
// exception and message, so at the same operand.
func TestErrorsAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	reqs := make([]any, len(errorCases))
	for i, c := range errorCases {
		reqs[i] = map[string]any{"template": c, "context": map[string]any{}, "now": oracleNow.Format("2006-01-02T15:04:05")}
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	sentinels := map[string]error{"TypeError": ErrType, "UndefinedError": ErrUndefined, "TemplateError": ErrRaised, "SecurityError": ErrSecurity}
	for i, c := range errorCases {
		class, msg, _ := strings.Cut(res[i].Error, ": ")
		want, known := sentinels[class]
		if res[i].Out != nil || !known {
			t.Fatalf("jinja2 on %q: %q, %q; want one of %v", c, pyoracle.Check("", nil, res[i]), res[i].Error, sentinels)
		}
		_, err := renderCase(t, c, "")
		if !errors.Is(err, want) || !strings.HasSuffix(err.Error(), ": "+msg) {
			t.Errorf("Render(%q) = %v, want %v: %s", c, err, want, msg)
		}
	}
}

// TestConcatLimits checks that chains count their length as the
// step-by-step fold does, printed or not.
func TestConcatLimits(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxOutput = 10
	for _, c := range []struct {
		tmpl string
		fail bool
	}{
		{"{{ 'abc' + 'def' + 'ghij' }}", false},
		{"{{ 'abc' + 'def' + 'ghijk' }}", true},
		{"{{ 'abc' ~ 'def' ~ 'ghijk' }}", true},
		{"{% set x = 'abc' + 'def' + 'ghijk' %}", true},
		{"{% set x = 'abc' + 'def' + 'ghij' %}{{ x }}{{ x }}", true},
		{"12345{{ 'abc' + 'def' }}", true},
		{"1234{{ 'abc' + 'def' }}", false},
		{"1234{{ 'abc' ~ 'def' }}", false},
		{"{% set s %}1234{{ 'abc' + 'def' }}{% endset %}", false},
		{"x{% set s %}1234{{ 'abc' + 'def' }}{% endset %}", true},
	} {
		tp, err := CompileWithLimits(c.tmpl, lim)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tp.Render(nil)
		if got := errors.Is(err, ErrLimit); got != c.fail {
			t.Errorf("Render(%q) = %q, %v; want a limit error: %v", c.tmpl, out, err, c.fail)
		}
	}
}

// TestChainOutputBytes checks that printed chains of strings go to the
// output piece by piece: a render of two 1 MiB messages, each printed
// twice through a chain, allocates about its 4 MiB output (sized by
// SizeHint) and no joined copies of the messages.
func TestChainOutputBytes(t *testing.T) {
	tp, err := Compile("{% for m in ms %}{{ '<' + m.role + '>\\n' + m.content + '</' + m.role + '>\\n' }}{{ m.role ~ ':' ~ m.content }}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 1<<20)
	var msgs []Value
	for _, role := range []string{"user", "assistant"} {
		d := NewDict()
		d.SetString("role", role)
		d.SetString("content", big)
		msgs = append(msgs, d)
	}
	ctx := map[string]Value{"ms": NewList(msgs...)}
	const size = 4<<20 + 55 // 2 × (2 MiB + 8) + 3 × len("user" + "assistant")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := tp.RenderWith(ctx, RenderOptions{SizeHint: size})
	runtime.ReadMemStats(&after)
	if err != nil || len(out) != size {
		t.Fatalf("RenderWith = %d bytes, %v; want %d bytes", len(out), err, size)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > size+256<<10 {
		t.Errorf("RenderWith allocated %d bytes, want about %d", n, size)
	}
}
