package jinja

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// oracleNow is the clock both sides use for strftime_now.
var oracleNow = time.Date(2026, 3, 7, 15, 4, 5, 0, time.UTC)

func contextOf(t *testing.T, js string) map[string]Value {
	t.Helper()
	ctx := map[string]Value{}
	if js == "" {
		return ctx
	}
	v, err := FromJSON([]byte(js))
	if err != nil {
		t.Fatalf("FromJSON(%s): %v", js, err)
	}
	d := v.(*Dict)
	for i, k := range d.Keys() {
		ctx[k.(string)] = d.Values()[i]
	}
	return ctx
}

func renderCase(t *testing.T, tmpl, ctx string) (string, error) {
	t.Helper()
	tp, err := Compile(tmpl)
	if err != nil {
		return "", err
	}
	return tp.RenderWith(contextOf(t, ctx), RenderOptions{Now: func() time.Time { return oracleNow }})
}

// TestFeaturesAgainstJinja2 renders every feature case with Go and with
// Python jinja2 configured as transformers does.
func TestFeaturesAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	reqs := make([]any, len(featureCases))
	for i, c := range featureCases {
		ctx := json.RawMessage("{}")
		if c.ctx != "" {
			ctx = json.RawMessage(c.ctx)
		}
		reqs[i] = map[string]any{"template": c.tmpl, "context": ctx, "now": oracleNow.Format("2006-01-02T15:04:05")}
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range featureCases {
		t.Run(c.name, func(t *testing.T) {
			out, err := renderCase(t, c.tmpl, c.ctx)
			if d := pyoracle.Check(out, err, res[i]); d != "" {
				t.Errorf("Render(%q):\n%s", c.tmpl, d)
			}
		})
	}
}

// TestFeatureCasesRender guards the table itself: cases that should render
// do render in Go (a case failing on both sides by accident proves nothing).
func TestFeatureCasesRender(t *testing.T) {
	for _, c := range featureCases {
		if _, err := renderCase(t, c.tmpl, c.ctx); err != nil {
			t.Logf("%s: %v", c.name, err)
		}
	}
}
