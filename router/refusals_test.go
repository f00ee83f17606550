package router

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// logLines decodes the JSON log lines written to buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRouteLogsRefusals: every request the router refuses is logged once at
// INFO with its id, path, model, status and reason.
func TestRouteLogsRefusals(t *testing.T) {
	tr := newTestRouter(t)
	var buf bytes.Buffer
	tr.refusals.logger = slog.New(slog.NewJSONHandler(&buf, nil))
	for _, body := range []string{`{"model":"missing","prompt":"x"}`, `{"model":`} {
		if _, err := tr.Route(t.Context(), Request{ID: "req-1", Path: "/v1/completions", Body: []byte(body)}); AsError(err) == nil {
			t.Fatalf("Route(%s) = %v, want a refusal", body, err)
		}
	}
	lines := logLines(t, &buf)
	if len(lines) != 2 {
		t.Fatalf("logged %d lines for 2 refusals: %s", len(lines), buf.String())
	}
	want := map[string]any{
		"level": "INFO", "msg": "request refused", "request_id": "req-1", "path": "/v1/completions",
		"model": "missing", "status": float64(http.StatusNotFound), "type": "model_not_found", "param": "model",
	}
	for k, v := range want {
		if lines[0][k] != v {
			t.Errorf("refusal line %v: %s = %v, want %v", lines[0], k, lines[0][k], v)
		}
	}
	if r, _ := lines[0]["reason"].(string); !strings.Contains(r, `"missing"`) {
		t.Errorf("refusal line %v: reason %q, want it to name the model", lines[0], r)
	}
	if lines[1]["status"] != float64(http.StatusBadRequest) || lines[1]["model"] != "" {
		t.Errorf("the unreadable body's line = %v, want status 400 and no model", lines[1])
	}
}

// TestRefusalLogRateLimited: a flood logs refusalsPerSecond lines a second;
// the next line logged counts those left out.
func TestRefusalLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	l := &refusalLog{logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	e := unavailable("no ready pod serves model %q", "m")
	now := time.Unix(1000, 0)
	for range refusalsPerSecond + 7 {
		l.log(now, "id", "/v1/completions", "m", e)
	}
	if n := len(logLines(t, &buf)); n != refusalsPerSecond {
		t.Fatalf("a flood of %d refusals in one second logged %d lines, want %d", refusalsPerSecond+7, n, refusalsPerSecond)
	}
	buf.Reset()
	l.log(now.Add(time.Second), "id", "/v1/completions", "m", e)
	l.log(now.Add(time.Second), "id", "/v1/completions", "m", e)
	lines := logLines(t, &buf)
	if len(lines) != 2 || lines[0]["refusals_not_logged"] != float64(7) || lines[1]["refusals_not_logged"] != nil {
		t.Errorf("the next second's lines = %v, want the first to count the 7 left out and the second none", lines)
	}
}

// TestNothingToRouteTo: a request naming no model, with no pod at all, is
// refused as having nowhere to go, not as a pod of model "".
func TestNothingToRouteTo(t *testing.T) {
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hasher, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(DefaultConfig(), fleet.New(index), index, hasher, byteTokens{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Route(t.Context(), Request{ID: "r", Path: "/"})
	if e := AsError(err); e == nil || e.Status != http.StatusServiceUnavailable || e.Message != "no ready pod to route to" {
		t.Errorf("GET / with no pod = %v, want 503 \"no ready pod to route to\"", err)
	}
}

// TestTooLongNotTokenized: a body over MaxTokenizeBytes is routed by load,
// reason too-long, without tokenizing; token ids given in the request are
// hashed whatever their size, having nothing to tokenize.
func TestTooLongNotTokenized(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.MaxTokenizeBytes = 64
	long := `{"model":"llama","prompt":"` + strings.Repeat("a", 100) + `"}`
	d, err := tr.Route(t.Context(), Request{Path: "/v1/completions", Body: []byte(long)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Done()
	if d.Reason != ReasonTooLong || d.Tokens != 0 || d.Stages.Tokenize != 0 {
		t.Errorf("a %d-byte body over a 64-byte bound = reason %s, %d tokens, tokenized in %v; want too-long and no tokenizing", len(long), d.Reason, d.Tokens, d.Stages.Tokenize)
	}
	ids := `{"model":"llama","prompt":[` + strings.TrimSuffix(strings.Repeat("1,", 40), ",") + `]}`
	d2, err := tr.Route(t.Context(), Request{Path: "/v1/completions", Body: []byte(ids)})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Done()
	if d2.Reason == ReasonTooLong || d2.Tokens != 40 {
		t.Errorf("token ids over the bound = reason %s, %d tokens; want them hashed", d2.Reason, d2.Tokens)
	}
}
