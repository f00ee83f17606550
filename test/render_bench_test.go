package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// BenchmarkRenderDecision prices the render path against exact mode for
// an 8k-token chat nobody routed before: two routers in one process, one
// tokenizing itself (no prefix cache), one asking a render endpoint on
// loopback whose answers (the same ids) are ready before it is asked, so
// that what is measured is kvrouter's side, the round trip and the decode
// of the ids; alternately, in alternating order, the answer reuse off.
// Reported: each router's median decision and the render path's overhead
// (render − exact).
func BenchmarkRenderDecision(b *testing.B) {
	const conversations = 32
	exact, reg, _, _ := qwen3Router(b, 0, nil)
	bodies := make([][]byte, conversations)
	answers := map[string][]byte{}
	tk, err := reg.For("qwen3")
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := chat.Load(qwen3Dir(b), "")
	if err != nil {
		b.Fatal(err)
	}
	for i := range bodies {
		bodies[i] = conversation(1000+i, 25)
		req, err := chat.ParseRequest(bodies[i])
		if err != nil {
			b.Fatal(err)
		}
		ids, err := tmpl.Encode(tk, req)
		if err != nil {
			b.Fatal(err)
		}
		answers[string(bodies[i])], _ = json.Marshal(map[string]any{"request_id": "chatcmpl-1", "token_ids": ids, "features": nil, "model": "qwen3"})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answers[string(body)])
	}))
	b.Cleanup(srv.Close)
	cfg := router.DefaultConfig()
	cfg.Models = map[string]router.ModelMode{"qwen3": {Mode: router.ModeRender, Render: srv.URL}}
	cfg.Render.Reuse = 0
	rendered, _, _, _ := qwen3RouterWith(b, 0, nil, cfg)
	var ex, re, exTok, reTok []time.Duration
	route := func(r *router.Router, body []byte, total, tok *[]time.Duration) {
		d, err := r.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: body})
		if err != nil || d.Reason == router.ReasonRenderFailed || d.Reason == router.ReasonTokenizeError || d.Tokens < 7000 {
			b.Fatalf("Route = %+v, %v", d, err)
		}
		d.Done()
		*total, *tok = append(*total, d.Elapsed), append(*tok, d.Stages.Tokenize)
	}
	for i := 0; b.Loop(); i++ {
		body := bodies[i%conversations]
		if i%2 == 0 {
			route(exact, body, &ex, &exTok)
			route(rendered, body, &re, &reTok)
		} else {
			route(rendered, body, &re, &reTok)
			route(exact, body, &ex, &exTok)
		}
	}
	b.ReportMetric(medianMS(ex), "exact-p50-ms")
	b.ReportMetric(medianMS(re), "render-p50-ms")
	b.ReportMetric(medianMS(re)-medianMS(ex), "overhead-ms")
	b.ReportMetric(medianMS(exTok), "exact-tokenize-p50-ms")
	b.ReportMetric(medianMS(reTok), "render-call-p50-ms")
}
