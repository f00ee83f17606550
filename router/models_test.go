package router

import (
	"net/http"
	"testing"
)

// TestModelsGoneOrUnknown: a model whose pods are all gone is unavailable
// (503, which OpenAI clients retry); one never known is not found (404);
// any OpenAI path that names a model goes only to that model's pods, and
// one naming none to any pod.
func TestModelsGoneOrUnknown(t *testing.T) {
	tr := newTestRouter(t)
	route := func(path, body string) (*Decision, *Error) {
		t.Helper()
		d, err := tr.Route(t.Context(), Request{Path: path, Body: []byte(body)})
		if err != nil {
			e := AsError(err)
			if e == nil {
				t.Fatalf("Route(%s %s) = %v, want a decision or a refusal", path, body, err)
			}
			return nil, e
		}
		d.Done()
		return d, nil
	}
	if d, e := route("/v1/embeddings", `{"model":"qwen","input":"x"}`); e != nil || d.Pod != "d" {
		t.Errorf("embeddings for qwen = %+v, %v; want pod d, qwen's only pod", d, e)
	}
	if _, e := route("/v1/embeddings", `{"model":"nope","input":"x"}`); e == nil || e.Status != http.StatusNotFound {
		t.Errorf("embeddings for a model never known = %v, want 404, not a pod of another model", e)
	}
	if d, e := route("/v1/models", ``); e != nil || d == nil {
		t.Errorf("a path naming no model = %v, want any pod", e)
	}
	tr.fleet.Remove("d")
	for _, path := range []string{"/v1/completions", "/v1/embeddings"} {
		if _, e := route(path, `{"model":"qwen","prompt":"x","input":"x"}`); e == nil || e.Status != http.StatusServiceUnavailable {
			t.Errorf("%s for qwen once its pods are gone = %v, want 503", path, e)
		}
	}
	if _, e := route("/v1/completions", `{"model":"nope","prompt":"x"}`); e == nil || e.Status != http.StatusNotFound {
		t.Errorf("a completion for a model never known = %v, want 404", e)
	}
}
