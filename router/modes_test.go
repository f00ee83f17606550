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

// TestRenderAgentBodyAsChat: a render endpoint without /v1/messages/render
// renders an Anthropic body as the chat request vLLM converts it to.
func TestRenderAgentBodyAsChat(t *testing.T) {
	tr := newTestRouter(t)
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.Path)
		var body struct {
			Model    string
			Messages []struct{ Role, Content string }
		}
		if r.URL.Path != "/v1/chat/completions/render" {
			http.NotFound(w, r)
			return
		}
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.Model != "llama" || len(body.Messages) != 2 || body.Messages[0].Role != "system" || body.Messages[1].Content != "hi" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"token_ids": []int{1, 2, 3, 4, 5, 6, 7, 8}, "features": nil})
	}))
	t.Cleanup(srv.Close)
	tr.cfg.Models = map[string]ModelMode{"llama": {Mode: ModeRender, Render: srv.URL}}
	rep, err := tr.Score(Request{Path: "/v1/messages", Body: []byte(`{"model":"llama","max_tokens":9,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil || rep.Tokenization != ModeRender || rep.Tokens != 8 {
		t.Fatalf("Score = %+v, %v; want 8 tokens by render", rep, err)
	}
	if len(seen) != 2 || seen[0] != "/v1/messages/render" {
		t.Errorf("render paths called: %v, want /v1/messages/render then /v1/chat/completions/render", seen)
	}
}
