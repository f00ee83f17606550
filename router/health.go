package router

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// The parts of a model that exact routing needs, as Health names them.
const (
	PartTokenizer    = "tokenizer"     // the model's tokenizer
	PartChatTemplate = "chat_template" // the model's chat template, for chat requests
	PartRender       = "render"        // the model's render endpoint, for a model rendered there
)

// PartState is whether kvrouter has one part of a model: without it the
// model's requests (its chat requests, for the template) are routed by
// load alone.
type PartState struct {
	Model string `json:"model"`
	Part  string `json:"part"`
	Ready bool   `json:"ready"`
	// Reason is the decisions' reason while the part is missing.
	Reason Reason `json:"reason,omitempty"`
	// Error says why it is missing; "" when ready.
	Error string `json:"error,omitempty"`
	// Since is when the part became ready or missing.
	Since time.Time `json:"since"`
}

type partKey struct{ model, part string }

// Health tracks, per model and part, whether kvrouter can tokenize the
// model's prompts exactly: a part that goes missing is a WARN once (and
// INFO when it is back), and kvrouter_router_model_ready{model,part} says
// it at all times. It is safe for concurrent use.
type Health struct {
	logger *slog.Logger
	gauge  *prometheus.GaugeVec
	mu     struct {
		sync.RWMutex
		m map[partKey]*PartState
	}
}

// NewHealth returns a Health whose gauge is registered on reg (nil: none).
func NewHealth(logger *slog.Logger, reg prometheus.Registerer) (*Health, error) {
	h := &Health{logger: logger, gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "model_ready",
		Help: "1 when kvrouter has the part (tokenizer, chat_template; render: the model's render endpoint answers) of the model that exact routing needs, 0 while the model's requests are routed by load alone.",
	}, []string{"model", "part"})}
	h.mu.m = map[partKey]*PartState{}
	if err := register(reg, h.gauge); err != nil {
		return nil, err
	}
	return h, nil
}

// Set records that a model's part is ready (err nil) or missing, and why.
// A part already known in that state (missing for the same reason) costs
// a read lock, and keeps the error it was first missing with.
func (h *Health) Set(model, part string, err error) { h.set(model, part, err, false) }

// Refresh is Set, also putting a missing part's latest error in States
// (a download that failed with 401, then with 404).
func (h *Health) Refresh(model, part string, err error) { h.set(model, part, err, true) }

func (h *Health) set(model, part string, err error, refresh bool) {
	if h == nil {
		return
	}
	k := partKey{model, part}
	reason := Reason("")
	if err != nil {
		reason = partReason(part, err)
	}
	h.mu.RLock()
	s, ok := h.mu.m[k]
	same := ok && s.Ready == (err == nil) && s.Reason == reason
	h.mu.RUnlock()
	if same && (err == nil || !refresh) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok = h.mu.m[k]
	if !ok {
		s = &PartState{Model: model, Part: part}
		h.mu.m[k] = s
	}
	switch {
	case err == nil && (!ok || !s.Ready):
		s.Ready, s.Reason, s.Error, s.Since = true, "", "", time.Now()
		h.gauge.WithLabelValues(model, part).Set(1)
		if ok {
			h.logger.Info("model part here: its requests are routed by cache again", "model", model, "part", part)
		}
	case err != nil:
		was := s.Reason
		if !ok || s.Ready {
			s.Since = time.Now()
			h.gauge.WithLabelValues(model, part).Set(0)
		}
		s.Ready, s.Reason, s.Error = false, reason, err.Error()
		switch reason {
		case was: // said once
		case ReasonTokenizerPending:
			h.logger.Info("model part downloading: its requests are routed by load until it is here", "model", model, "part", part)
		default:
			h.logger.Warn("model part missing: its requests are routed by load alone", "model", model, "part", part, "reason", string(reason), "error", err)
		}
	}
}

// partReason is the decisions' reason while a part is missing for err.
func partReason(part string, err error) Reason {
	switch {
	case errors.Is(err, tokenizer.ErrPending):
		return ReasonTokenizerPending
	case part == PartChatTemplate:
		return ReasonNoChatTemplate
	case part == PartRender:
		return ReasonRenderFailed
	}
	return ReasonNoTokenizer
}

// States returns every part known, missing ones first, then by model and
// part.
func (h *Health) States() []PartState {
	if h == nil {
		return nil
	}
	h.mu.RLock()
	out := make([]PartState, 0, len(h.mu.m))
	for _, s := range h.mu.m {
		out = append(out, *s)
	}
	h.mu.RUnlock()
	slices.SortFunc(out, func(a, b PartState) int {
		if a.Ready != b.Ready {
			if !a.Ready {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Part, b.Part))
	})
	return out
}

// Missing returns the parts known to be missing.
func (h *Health) Missing() []PartState {
	all := h.States()
	i := slices.IndexFunc(all, func(s PartState) bool { return s.Ready })
	if i < 0 {
		return all
	}
	return all[:i]
}

// chatMissing reports whether err says a model has no chat template.
func chatMissing(err error) bool { return errors.Is(err, chat.ErrNoChatTemplate) }
