package test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/router"
)

// imageChat is a chat whose second user message shows an image, continued
// by turns more user/assistant exchanges.
func imageChat(system, image string, turns int) string {
	msgs := []string{
		fmt.Sprintf(`{"role":"system","content":%q}`, system),
		`{"role":"user","content":"Hello, I will show you a picture."}`,
		`{"role":"assistant","content":"Please do."}`,
		fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"Here it is:"},{"type":"image_url","image_url":{"url":%q}}]}`, image),
	}
	for i := range turns {
		msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"Answer %d."}`, i), `{"role":"user","content":"And now?"}`)
	}
	return `{"model":"qwen3","messages":[` + strings.Join(msgs, ",") + `]}`
}

// TestE2EMultimodalPrefix: a chat showing an image is routed, never
// refused, on the full blocks before its image only, and counted; its next
// turn (and the same chat with another image) finds the pod whose own KV
// events hold those blocks.
func TestE2EMultimodalPrefix(t *testing.T) {
	f := startFleet(t)
	system := strings.Repeat("You describe pictures for people who cannot see them, in plain words. ", 12)
	first := f.sendTo(t, "/v1/chat/completions", imageChat(system, "https://example.com/a.png", 0))
	pod := first.UpstreamHeaders[router.HeaderPod]
	_, total, _ := strings.Cut(first.UpstreamHeaders[router.HeaderCachedBlocks], "/")
	blocks, err := strconv.Atoi(total)
	if err != nil || blocks < 8 {
		t.Fatalf("first turn: %s = %q; want the blocks before the image (at least the system prompt's)", router.HeaderCachedBlocks, first.UpstreamHeaders[router.HeaderCachedBlocks])
	}
	f.awaitEvents(t, pod, blocks)
	for _, body := range []string{
		imageChat(system, "https://example.com/a.png", 1),
		imageChat(system, "https://example.com/b.png", 2),
	} {
		res := f.sendTo(t, "/v1/chat/completions", body)
		want := fmt.Sprintf("%d/%d", blocks, blocks)
		if res.UpstreamHeaders[router.HeaderPod] != pod || res.UpstreamHeaders[router.HeaderCachedBlocks] != want || res.UpstreamHeaders[router.HeaderReason] != "prefix" {
			t.Errorf("next turn: to %s (%s, %s), want %s by prefix with %s", res.UpstreamHeaders[router.HeaderPod],
				res.UpstreamHeaders[router.HeaderReason], res.UpstreamHeaders[router.HeaderCachedBlocks], pod, want)
		}
	}
}

// TestMultimodalCounted: the router counts a chat with media in
// kvrouter_router_multimodal_requests_total, and routes it by the text
// before its first media item (a plain chat is not counted).
func TestMultimodalCounted(t *testing.T) {
	metrics := prometheus.NewRegistry()
	r, _, _, _ := qwen3Router(t, 0, metrics)
	system := strings.Repeat("You describe pictures. ", 20)
	for _, body := range []string{imageChat(system, "x", 0), fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":"no picture"}]}`, system)} {
		d, err := r.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: []byte(body)})
		if err != nil || d.Reason == router.ReasonTokenizeError || d.Total == 0 {
			t.Fatalf("Route(%.60s…) = %+v, %v; want routed on its text", body, d, err)
		}
		d.Done()
	}
	counted := 0.0
	families, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() == "kvrouter_router_multimodal_requests_total" {
			counted = fam.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if counted != 1 {
		t.Errorf("kvrouter_router_multimodal_requests_total = %v, want 1", counted)
	}
}
