package router

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestTokenizationModes: render mode finds the ids the render endpoint
// answers (the same ids as the test tokenizer's: the same blocks match);
// a failing endpoint routes by load, reason render-failed; load mode
// never tokenizes; auto with a render endpoint renders what the
// tokenizer cannot (model qwen has none).
func TestTokenizationModes(t *testing.T) {
	tr := newTestRouter(t)
	tr.store("b", prompt, "", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Prompt string }
		if r.URL.Path != "/v1/completions/render" || json.NewDecoder(r.Body).Decode(&body) != nil || body.Prompt == "fail" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		ids := make([]uint32, len(body.Prompt))
		for i := range len(body.Prompt) {
			ids[i] = uint32(body.Prompt[i])
		}
		_ = json.NewEncoder(w).Encode([]any{map[string]any{"token_ids": ids, "features": nil}})
	}))
	t.Cleanup(srv.Close)
	for _, tt := range []struct {
		name   string
		mode   ModelMode
		model  string
		prompt string
		want   Reason
		via    Mode
	}{
		{"render", ModelMode{Mode: ModeRender, Render: srv.URL}, "llama", prompt, ReasonPrefix, ModeRender},
		{"render fails", ModelMode{Mode: ModeRender, Render: srv.URL}, "llama", "fail", ReasonRenderFailed, ""},
		{"load", ModelMode{Mode: ModeLoad}, "llama", prompt, ReasonTokenizationOff, ""},
		{"exact", ModelMode{Mode: ModeExact, Render: srv.URL}, "qwen", prompt, ReasonNoTokenizer, ""},
		{"auto without render", ModelMode{Mode: ModeAuto}, "qwen", prompt, ReasonNoTokenizer, ""},
		{"auto renders what it cannot tokenize", ModelMode{Mode: ModeAuto, Render: srv.URL}, "qwen", prompt, ReasonLoad, ModeRender},
	} {
		tr.cfg.Models = map[string]ModelMode{tt.model: tt.mode}
		d, err := tr.route("/v1/completions", completion(tt.model, tt.prompt, ""))
		if err != nil || d.Reason != tt.want {
			t.Fatalf("%s: Route = %+v, %v; want reason %s", tt.name, d, err, tt.want)
		}
		d.Done()
		rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion(tt.model, tt.prompt, ""))})
		if err != nil || rep.Tokenization != tt.via {
			t.Fatalf("%s: Score = %+v, %v; want tokenization %q", tt.name, rep, err, tt.via)
		}
	}
}
