package router

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/router/render"
	"github.com/kvrouter/kvrouter/tokenizer/models"
)

// Mode is how a model's prompts become token ids.
type Mode string

// The modes. Auto is exact when kvrouter reproduces the request, else
// render when a render endpoint is configured for the model (a URL, or
// its pods); vLLM serves the render paths only when asked to (vllm launch
// render, the scale-out endpoints), so kvrouter does not call pods it was
// not told serve them.
const (
	ModeAuto   Mode = "auto"
	ModeExact  Mode = "exact"  // kvrouter's tokenizer and template, in process
	ModeRender Mode = "render" // vLLM's render endpoints
	ModeLoad   Mode = "load"   // none: routed by load
)

// RenderPods is the render endpoint that stands for the model's own pods.
const RenderPods = "pods"

// ModelMode is one model's tokenization: its mode and its render endpoint
// (a base URL, RenderPods, or "": none configured).
type ModelMode struct {
	Mode   Mode   `json:"mode"`
	Render string `json:"render,omitempty"`
	// RenderOnly: the model has no tokenizer of its own configured (auto
	// renders it without looking for one).
	RenderOnly bool `json:"-"`
}

// ParseMode reads a mode; "" is auto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeExact, ModeRender, ModeLoad:
		return m, nil
	}
	return "", fmt.Errorf("%q: want auto, exact, render or load", s)
}

// ModelModes are the router's modes of the tokenizers section's (the
// values checked there).
func ModelModes(specs map[string]models.ModeSpec) map[string]ModelMode {
	if len(specs) == 0 {
		return nil
	}
	out := make(map[string]ModelMode, len(specs))
	for name, s := range specs {
		mode, _ := ParseMode(s.Mode)
		out[name] = ModelMode{Mode: mode, Render: s.Render, RenderOnly: s.RenderOnly}
	}
	return out
}

// Tokenizes reports whether kvrouter may tokenize the base model's
// prompts itself (it needs its tokenizer): not when the model is rendered
// only (mode render, or a render endpoint and no tokenizer of its own) or
// routed by load.
func (r *Router) Tokenizes(base string) bool {
	m := r.modeOf(base)
	return m.Mode != ModeRender && m.Mode != ModeLoad && !m.RenderOnly
}

// modeOf is base model's tokenization.
func (r *Router) modeOf(base string) ModelMode {
	if m, ok := r.cfg.Models[base]; ok {
		if m.Mode == "" {
			m.Mode = ModeAuto
		}
		return m
	}
	return ModelMode{Mode: ModeAuto}
}

// renderer is the router's render client and what it counts.
type renderer struct {
	client   *render.Client
	outcomes *prometheus.CounterVec
	duration prometheus.Histogram
	turn     atomic.Uint64 // rotates the pods asked first
}

func newRenderer(cfg render.Config, reg prometheus.Registerer) (*renderer, error) {
	rd := &renderer{
		client: render.New(cfg, nil),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "render", Name: "calls_total",
			Help: "Calls to render endpoints by outcome: ok, reused (a recent answer to the same body), refused (a 4xx for the body), error, timeout, busy (too many in flight), open (every endpoint's breaker open), not_served.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kvrouter", Subsystem: "render", Name: "call_duration_seconds",
			Help:    "Time of a call to a render endpoint, answered or not.",
			Buckets: prometheus.ExponentialBuckets(250e-6, 2, 14),
		}),
	}
	for _, o := range render.Outcomes {
		rd.outcomes.WithLabelValues(o)
	}
	rd.client.Observe = func(_, outcome string, took time.Duration) {
		rd.outcomes.WithLabelValues(outcome).Inc()
		if took > 0 {
			rd.duration.Observe(took.Seconds())
		}
	}
	return rd, register(reg, rd.outcomes, rd.duration)
}

// renderEndpoints are where to render a model's request: its configured
// URL, or its candidate pods (host:port), starting at a rotating one.
func (r *Router) renderEndpoints(mm ModelMode, members []*fleet.Member) []string {
	if mm.Render != "" && mm.Render != RenderPods {
		return []string{mm.Render}
	}
	out := make([]string, 0, len(members))
	start := int(r.renderer.turn.Add(1))
	for i := range members {
		out = append(out, members[(start+i)%len(members)].Endpoint)
	}
	return out
}

// renderTokens renders p through the model's render endpoints into
// sc.tokens, with its multimodal items. An Anthropic Messages or OpenAI
// Responses body whose render path the endpoints do not serve is
// rendered as the chat request vLLM converts it to, when kvrouter's
// conversion is exact.
func (r *Router) renderTokens(mm ModelMode, path string, p *Parsed, sc *scratch) ([]blockhash.MMItem, error) {
	media := p.Chat != nil && p.Chat.HasMedia()
	endpoints := r.renderEndpoints(mm, sc.members)
	ids, items, err := r.renderer.client.Render(context.Background(), sc.tokens[:0], endpoints, path, p.Body, media)
	if errors.Is(err, render.ErrNotServed) && (p.Kind == KindMessages || p.Kind == KindResponses) && p.chatErr == nil {
		var body []byte
		if body, err = p.Chat.ChatBody(p.Model); err == nil {
			ids, items, err = r.renderer.client.Render(context.Background(), sc.tokens[:0], endpoints, "/v1/chat/completions", body, media)
		}
	}
	sc.tokens = ids
	return items, err
}

// ModelTokenization is a model's mode as /debug/tokenizers shows it.
type ModelTokenization struct {
	Model string `json:"model"`
	ModelMode
	// RenderOnly: no tokenizer of its own; RenderHealthy: its render
	// endpoint answered the last call (absent before any).
	RenderOnly    bool  `json:"render_only,omitempty"`
	RenderHealthy *bool `json:"render_healthy,omitempty"`
}

// Tokenization lists the models configured with a mode or a render
// endpoint (every other model is auto with none), with their render
// endpoint's health.
func (r *Router) Tokenization() []ModelTokenization {
	states := map[string]bool{}
	for _, st := range r.modelHealth.States() {
		if st.Part == PartRender {
			states[st.Model] = st.Ready
		}
	}
	out := make([]ModelTokenization, 0, len(r.cfg.Models))
	for _, name := range slices.Sorted(maps.Keys(r.cfg.Models)) {
		mt := ModelTokenization{Model: name, ModelMode: r.modeOf(name), RenderOnly: r.cfg.Models[name].RenderOnly}
		if ok, seen := states[name]; seen {
			mt.RenderHealthy = &ok
		}
		out = append(out, mt)
	}
	return out
}
