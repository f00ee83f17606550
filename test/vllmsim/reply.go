package vllmsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kvrouter/kvrouter/router"
)

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 16<<20 {
		return nil, errTooLarge
	}
	return b, nil
}

var words = strings.Fields("the cache already held this prefix so the answer starts sooner than a cold pod could manage today")

// reply answers a completion with plausible text, streamed as SSE when the
// request asks, decoding one token every DecodePerToken.
func (p *Pod) reply(w http.ResponseWriter, r *http.Request, req *router.Parsed, prompt, cached int) {
	usage := map[string]any{
		"prompt_tokens": prompt, "completion_tokens": p.cfg.OutputTokens, "total_tokens": prompt + p.cfg.OutputTokens,
		"prompt_tokens_details": map[string]int{"cached_tokens": cached},
	}
	if !req.Stream {
		var text strings.Builder
		for i := range p.cfg.OutputTokens {
			if !sleep(r.Context(), p.cfg.DecodePerToken) {
				return
			}
			text.WriteString(" " + words[i%len(words)])
		}
		choice := map[string]any{"index": 0, "text": text.String(), "finish_reason": "length"}
		object := "text_completion"
		if req.Chat != nil {
			object = "chat.completion"
			choice = map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": text.String()}, "finish_reason": "length"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "cmpl-" + p.cfg.Name, "object": object, "model": req.Model, "served_by": p.cfg.Name,
			"choices": []map[string]any{choice}, "usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i := range p.cfg.OutputTokens {
		if !sleep(r.Context(), p.cfg.DecodePerToken) {
			return
		}
		choice := map[string]any{"index": 0, "text": " " + words[i%len(words)]}
		if req.Chat != nil {
			choice = map[string]any{"index": 0, "delta": map[string]string{"content": " " + words[i%len(words)]}}
		}
		chunk, _ := json.Marshal(map[string]any{"model": req.Model, "choices": []map[string]any{choice}})
		fmt.Fprintf(w, "data: %s\n\n", chunk)
		_ = rc.Flush()
	}
	last, _ := json.Marshal(map[string]any{"object": "text_completion", "model": req.Model, "choices": []any{}, "usage": usage})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", last)
}
