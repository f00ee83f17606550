package test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/router"
	kvfleet "github.com/kvrouter/kvrouter/router/fleet"
)

// TestE2EEngines: pods of SGLang (one event per 16-token page, ids of its
// own) and of TensorRT-LLM (32-token blocks, map events, ids of its own)
// are followed as such: a conversation's follow-ups go to the pod that
// holds its earlier turns, /v1/score reports exactly the blocks it holds
// (for TensorRT-LLM, those of its whole 32-token blocks, two of
// kvrouter's each), and the pod's own metrics page reads as its queue and KV
// use.
func TestE2EEngines(t *testing.T) {
	for _, engine := range []string{kvpod.EngineSGLang, kvpod.EngineTRTLLM} {
		t.Run(engine, func(t *testing.T) {
			f := startFleetWith(t, fleetOptions{pods: 2, engines: []string{engine}})
			system := strings.Repeat("You answer questions about "+engine+" with care and precision. ", 12)
			first := f.send(t, fmt.Sprintf(`{"model":"qwen3","prompt":%q,"max_tokens":1}`, system+"What is a page?"))
			pod := first.UpstreamHeaders[router.HeaderPod]
			body := fmt.Sprintf(`{"model":"qwen3","prompt":%q,"max_tokens":1}`, system+"And a block?")
			var rep *router.Report
			var held router.Score
			if !poll(func() bool {
				var err error
				if rep, err = f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(body)}); err != nil {
					t.Fatal(err)
				}
				if j := slices.IndexFunc(rep.Pods, func(s router.Score) bool { return s.Pod == pod }); j >= 0 {
					held = rep.Pods[j]
				}
				return held.Tiers.GPU > 0
			}) {
				t.Fatalf("%s's blocks never reached the index", pod)
			}
			// The shared prefix, in kvrouter's blocks: what the first
			// prompt's blocks have in common with the follow-up's.
			cached := f.sims[pod].Cached()
			want := 0
			for want < len(rep.Blocks) && slices.Contains(cached, mustUint(t, rep.Blocks[want])) {
				want++
			}
			if engine == kvpod.EngineTRTLLM { // whole 32-token blocks of the first prompt only
				want = min(want, len(cached)-len(cached)%2)
			}
			if held.Tiers.GPU != want {
				t.Errorf("/v1/score: %s holds %d blocks, want %d", pod, held.Tiers.GPU, want)
			}
			second := f.send(t, body)
			if h := second.UpstreamHeaders; h[router.HeaderPod] != pod || h[router.HeaderReason] != "prefix" {
				t.Errorf("the follow-up went to %s (%s), want %s by prefix", h[router.HeaderPod], h[router.HeaderReason], pod)
			}
			path := "/metrics"
			if engine == kvpod.EngineTRTLLM {
				path = "/prometheus/metrics"
			}
			resp, err := http.Get("http://" + f.pods[pod] + path)
			if err != nil {
				t.Fatal(err)
			}
			q, _, err := kvfleet.ParseVLLMEngines(resp.Body)
			_ = resp.Body.Close()
			if err != nil || q.Waiting != 0 || q.Running < 0 || q.KVUsage <= 0 {
				t.Errorf("%s's metrics read as %+v, %v: want its queue and KV use", engine, q, err)
			}
		})
	}
}

// TestE2EMixedEngines: one model served by a vLLM pod and an SGLang pod
// routes as one fleet: each pod's conversation follows it, whichever
// engine names its blocks, and a prompt cached on both is reported on
// both.
func TestE2EMixedEngines(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 2, engines: []string{kvpod.EngineVLLM, kvpod.EngineSGLang}})
	shared := strings.Repeat("Both engines serve this model and hold this shared preamble. ", 10)
	body := func(s string) string { return fmt.Sprintf(`{"model":"qwen3","prompt":%q,"max_tokens":1}`, s) }
	// Each conversation's own part spans whole blocks of its own.
	own := func(i int, pod string) string {
		return strings.Repeat(fmt.Sprintf("Conversation %d runs on %s alone. ", i, pod), 6)
	}
	for i, pod := range []string{"sim-0", "sim-1"} {
		f.post(t, pod, body(shared+own(i, pod)))
	}
	rep := &router.Report{}
	if !poll(func() bool {
		var err error
		if rep, err = f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(body(shared + "Who holds this?"))}); err != nil {
			t.Fatal(err)
		}
		return len(rep.Pods) == 2 && rep.Pods[0].Matched > 0 && rep.Pods[0].Matched == rep.Pods[1].Matched
	}) {
		t.Fatalf("the shared preamble matched %+v, want the same blocks on both pods", rep.Pods)
	}
	for i, pod := range []string{"sim-0", "sim-1"} {
		res := f.send(t, body(shared+own(i, pod)+"And then?"))
		h := res.UpstreamHeaders
		if h[router.HeaderPod] != pod || h[router.HeaderReason] != "prefix" {
			t.Errorf("conversation %d went to %s (%s), want %s by prefix", i, h[router.HeaderPod], h[router.HeaderReason], pod)
		}
		cached, _, _ := strings.Cut(h[router.HeaderCachedBlocks], "/")
		if n, err := strconv.Atoi(cached); err != nil || n <= rep.Pods[0].Matched {
			t.Errorf("conversation %d: %s blocks cached, want more than the shared preamble's %d", i, h[router.HeaderCachedBlocks], rep.Pods[0].Matched)
		}
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
