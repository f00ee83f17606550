package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/render"
)

// renderService plays a GPU-less render Service (vllm launch render) in
// front of simulated pod sim-0's render paths, switched by mode: "up"
// forwards, "down" drops the connection, "slow" never answers in time.
type renderService struct {
	*httptest.Server
	mode atomic.Value // string
}

func newRenderService(t *testing.T, sim http.Handler) *renderService {
	t.Helper()
	rs := &renderService{}
	rs.mode.Store("up")
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch rs.mode.Load() {
		case "down":
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			sim.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(rs.Close)
	return rs
}

// counter is the value of the counter name{label=value} in reg.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// renderItems asks pod's render path for a chat body's media items.
func renderItems(t *testing.T, f *fleet, pod, body string) []blockhash.MMItem {
	t.Helper()
	resp, err := http.Post("http://"+f.pods[pod]+"/v1/chat/completions/render", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	r, err := render.Decode(nil, data)
	if err != nil || len(r.MM) == 0 {
		t.Fatalf("render of %s: %v, %s", body, err, data)
	}
	return r.MM
}

// sendChat routes a chat through ext_proc and forwards it to its pod;
// it returns the routing headers and the prompt tokens the pod's cache
// held (the reply's usage).
func (f *fleet) sendChat(t *testing.T, body string) (map[string]string, int) {
	t.Helper()
	res, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/chat/completions", Body: []byte(body)})
	if err != nil || res.Status != 200 {
		t.Fatalf("routing %s: %+v, %v", body, res, err)
	}
	_, cached := forward(t, res, "/v1/chat/completions")
	return res.UpstreamHeaders, cached
}

// matched is the cached blocks of x-kvrouter-cached-blocks.
func matched(t *testing.T, h map[string]string) int {
	t.Helper()
	m, _, _ := strings.Cut(h[router.HeaderCachedBlocks], "/")
	n, err := strconv.Atoi(m)
	if err != nil {
		t.Fatalf("%s: %q", router.HeaderCachedBlocks, h[router.HeaderCachedBlocks])
	}
	return n
}

// renderCooldown is how long a failing render endpoint is left alone in
// these tests.
const renderCooldown = 300 * time.Millisecond

// TestE2ERenderOnlyModel: a model kvrouter has no tokenizer for, whose
// render Service answers its token ids, routes every later turn of a
// conversation to the pod caching it, its cached blocks exactly the
// pod's; its render Service down or slow, every request is still routed
// (by load, reason render-failed, counted).
func TestE2ERenderOnlyModel(t *testing.T) {
	var rs *renderService
	f := startFleetWith(t, fleetOptions{
		pods: 3, untokenized: true,
		sim: func(_ int, c *vllmsim.Config) { c.Render = true },
		routing: func(f *fleet, c *router.Config) {
			rs = newRenderService(t, f.sims["sim-0"].Handler())
			c.Models = map[string]router.ModelMode{"qwen3": {Mode: router.ModeAuto, Render: rs.URL, RenderOnly: true}}
			c.Render.Cooldown = renderCooldown
		},
	})
	system := strings.Repeat("You translate legal contracts clause by clause and keep every defined term. ", 10)
	msgs := []string{fmt.Sprintf(`{"role":"system","content":%q}`, system), `{"role":"user","content":"Translate clause 1."}`}
	var pod string
	for turn := range 4 {
		h, cached := f.sendChat(t, fmt.Sprintf(`{"model":"qwen3","messages":[%s]}`, strings.Join(msgs, ",")))
		if turn == 0 {
			pod = h[router.HeaderPod]
		} else if h[router.HeaderPod] != pod || h[router.HeaderReason] != "prefix" {
			t.Fatalf("turn %d: to %s (%s, %s), want %s by prefix", turn, h[router.HeaderPod], h[router.HeaderReason], h[router.HeaderCachedBlocks], pod)
		}
		if matched(t, h)*16 != cached {
			t.Fatalf("turn %d: %s cached blocks, but the pod's cache held %d tokens", turn, h[router.HeaderCachedBlocks], cached)
		}
		f.awaitExact(t, pod, f.sims[pod].Cached)
		msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"Clause %d translated."}`, turn+1), fmt.Sprintf(`{"role":"user","content":"Translate clause %d."}`, turn+2))
	}
	rep, err := f.router.Score(router.Request{Path: "/v1/chat/completions", Body: []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil || rep.Tokenization != router.ModeRender {
		t.Fatalf("score: %+v, %v; want tokenization render", rep, err)
	}

	// Down, then slow: every request still routed, by load, and counted.
	for _, mode := range []string{"down", "slow"} {
		rs.mode.Store(mode)
		for i := range 6 {
			res, err := f.envoy.Do(context.Background(), envoyclient.Request{
				Path: "/v1/chat/completions",
				Body: []byte(fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"user","content":"question %s %d"}]}`, mode, i)),
			})
			if err != nil || res.Status != 200 || res.Destination == "" || res.UpstreamHeaders[router.HeaderReason] != "render-failed" {
				t.Fatalf("render Service %s: %+v, %v; want routed by load, reason render-failed", mode, res, err)
			}
		}
		rs.mode.Store("up")
		time.Sleep(renderCooldown) // the breaker lets a trial call through
	}
	for _, outcome := range []string{"error", "timeout", "open"} {
		if n := counter(t, f.reg, "kvrouter_render_calls_total", "outcome", outcome); n == 0 {
			t.Errorf("kvrouter_render_calls_total{outcome=%q} = 0", outcome)
		}
	}
}

// TestE2EMultimodalRender: with a render endpoint (the pods' own), the
// second request showing the same image with a longer text after it
// matches blocks past the image on the pod that served the first, as
// many as that pod's cache holds.
func TestE2EMultimodalRender(t *testing.T) {
	f := startFleetWith(t, fleetOptions{
		pods: 3,
		sim:  func(_ int, c *vllmsim.Config) { c.Render = true },
		routing: func(_ *fleet, c *router.Config) {
			c.Models = map[string]router.ModelMode{"qwen3": {Mode: router.ModeAuto, Render: router.RenderPods}}
		},
	})
	system := strings.Repeat("You describe pictures for people who cannot see them, in plain words. ", 8)
	image := func(text string) string {
		return fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}},{"type":"text","text":%q}]}]}`, system, text)
	}
	question := "What is in this picture? Tell me what the animal is doing, where it sits, what surrounds it, and how the light falls on it."
	h, _ := f.sendChat(t, image(question))
	pod := h[router.HeaderPod]
	f.awaitExact(t, pod, f.sims[pod].Cached)
	h2, cached := f.sendChat(t, image(question+" Then describe the colors, then the shapes, then the mood, at length and in order."))
	blocks := matched(t, h2)
	imageEnd := 0 // the blocks before the image and those it fills
	for _, it := range renderItems(t, f, pod, image("x")) {
		imageEnd = (it.Offset + it.Length) / 16
	}
	if h2[router.HeaderPod] != pod || blocks*16 != cached || blocks <= imageEnd {
		t.Fatalf("second request: to %s with %s blocks (the pod held %d tokens); want %s, past the image's block %d, as many as the pod held",
			h2[router.HeaderPod], h2[router.HeaderCachedBlocks], cached, pod, imageEnd)
	}
}
