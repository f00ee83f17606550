package jinja

import (
	"encoding/json"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// TestGeneratedAgainstJinja2 renders templates assembled at random from
// the fuzz fragments with Go and with jinja2: same output or both fail
// (most fail to compile; the rest exercise odd combinations). GENERATED=n
// runs n templates instead of 3000.
func TestGeneratedAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	n := 3000
	if v, err := strconv.Atoi(os.Getenv("GENERATED")); err == nil {
		n = v
	}
	rng := rand.New(rand.NewSource(12))
	ctxJSON := `{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]},
		{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
		"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "x": 1.5, "n": null, "add_generation_prompt": true, "bos_token": "<s>"}`
	var srcs []string
	var reqs []any
	for len(srcs) < n {
		data := make([]byte, 2+rng.Intn(14))
		rng.Read(data)
		var b strings.Builder
		for _, c := range data {
			b.WriteString(fragments[int(c)%len(fragments)])
		}
		srcs = append(srcs, b.String())
		reqs = append(reqs, map[string]any{"template": b.String(), "context": json.RawMessage(ctxJSON)})
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	ok, bad := 0, 0
	for i, src := range srcs {
		out, err := renderCase(t, src, ctxJSON)
		if d := pyoracle.Check(out, err, res[i]); d != "" {
			bad++
			if bad < 40 {
				t.Errorf("%q: %s", src, d)
			}
		} else if err == nil {
			ok++
		}
	}
	t.Logf("%d of %d rendered identically, %d differ, the rest fail on both sides", ok, n, bad)
}
