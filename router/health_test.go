package router

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

func TestHealth(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	h, err := NewHealth(slog.New(slog.NewJSONHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	missing := fmt.Errorf("%w \"m\": no such file", tokenizer.ErrUnknownModel)
	h.Set("m", PartTokenizer, missing)
	h.Set("m", PartTokenizer, missing) // said once
	h.Set("m", PartChatTemplate, chat.ErrNoChatTemplate)
	h.Set("ok", PartTokenizer, nil)
	h.Set("p", PartTokenizer, fmt.Errorf("%w: model \"p\"", tokenizer.ErrPending))
	if n := strings.Count(logs.String(), `"level":"WARN"`); n != 2 {
		t.Errorf("%d WARN lines for 2 missing parts (and one downloading), want 2:\n%s", n, logs.String())
	}
	// A download that fails is said as it happens.
	logs.Reset()
	h.Set("p", PartTokenizer, fmt.Errorf("%w: model \"p\"", tokenizer.ErrPending))
	h.Set("p", PartTokenizer, fmt.Errorf("%w \"p\": 404", tokenizer.ErrUnknownModel))
	h.Set("p", PartTokenizer, fmt.Errorf("%w \"p\": 404", tokenizer.ErrUnknownModel))
	if n := strings.Count(logs.String(), `"level":"WARN"`); n != 1 || !strings.Contains(logs.String(), "404") {
		t.Errorf("a failed download logged %d WARN lines, want 1 with its error:\n%s", n, logs.String())
	}
	h.Refresh("p", PartTokenizer, fmt.Errorf("%w \"p\": 401", tokenizer.ErrUnknownModel))
	if n := strings.Count(logs.String(), `"level":"WARN"`); n != 1 || !strings.Contains(h.Missing()[2].Error, "401") {
		t.Errorf("Refresh with a new error: %d WARN lines, state %+v, want still 1 and the 401", n, h.Missing()[2])
	}
	h.Set("p", PartTokenizer, fmt.Errorf("%w: model \"p\"", tokenizer.ErrPending)) // downloading again
	for _, tt := range []struct {
		model, part string
		want        float64
	}{{"m", PartTokenizer, 0}, {"m", PartChatTemplate, 0}, {"ok", PartTokenizer, 1}, {"p", PartTokenizer, 0}} {
		if got := testutil.ToFloat64(h.gauge.WithLabelValues(tt.model, tt.part)); got != tt.want {
			t.Errorf("model_ready{%s,%s} = %v, want %v", tt.model, tt.part, got, tt.want)
		}
	}
	miss := h.Missing()
	want := []struct {
		model, part string
		reason      Reason
	}{{"m", PartChatTemplate, ReasonNoChatTemplate}, {"m", PartTokenizer, ReasonNoTokenizer}, {"p", PartTokenizer, ReasonTokenizerPending}}
	if len(miss) != len(want) {
		t.Fatalf("Missing() = %+v, want %d parts", miss, len(want))
	}
	for i, w := range want {
		if miss[i].Model != w.model || miss[i].Part != w.part || miss[i].Reason != w.reason || miss[i].Error == "" {
			t.Errorf("Missing()[%d] = %+v, want %s %s by %s with its error", i, miss[i], w.model, w.part, w.reason)
		}
	}
	logs.Reset()
	h.Set("m", PartTokenizer, nil)
	if !strings.Contains(logs.String(), `"level":"INFO"`) || testutil.ToFloat64(h.gauge.WithLabelValues("m", PartTokenizer)) != 1 {
		t.Errorf("a part back: log %q, gauge %v, want an INFO line and 1", logs.String(), testutil.ToFloat64(h.gauge.WithLabelValues("m", PartTokenizer)))
	}
	if got := len(h.States()); got != 4 {
		t.Errorf("States() has %d parts, want 4", got)
	}
	var none *Health
	none.Set("x", PartTokenizer, missing) // a nil Health ignores all
	if none.States() != nil {
		t.Errorf("nil Health's States() = %v, want nil", none.States())
	}
}

// TestRegistryTokenizersHealth: a model without a tokenizer, or a chat
// request for a model without a chat template, gets a reason of its own
// and tells Health.
func TestRegistryTokenizersHealth(t *testing.T) {
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Qwen3's tokenizer.json without its tokenizer_config.json: no chat
	// template.
	data, err := os.ReadFile(filepath.Join(qwen3Dir(t), "tokenizer.json"))
	must(err)
	dir := t.TempDir()
	must(os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o600))
	cfg := tokenizer.DefaultConfig()
	cfg.Models = map[string]string{"plain": dir}
	reg, err := tokenizer.NewRegistry(cfg)
	must(err)
	h, err := NewHealth(slog.New(slog.DiscardHandler), nil)
	must(err)
	tokens := RegistryTokenizers{Registry: reg, Chats: chat.NewRegistry(reg, nil), Health: h}
	chatReq, err := chat.ParseRequest([]byte(`{"messages": [{"role": "user", "content": "hi"}]}`))
	must(err)
	tests := []struct {
		name, model string
		p           *Parsed
		want        Reason
	}{
		{"no tokenizer", "nope", &Parsed{Prompt: "hi"}, ReasonNoTokenizer},
		{"no chat template", "plain", &Parsed{Chat: chatReq}, ReasonNoChatTemplate},
	}
	for _, tt := range tests {
		_, err := tokens.AppendTokens(nil, tt.model, tt.p)
		if got, _ := missingReason(err); got != tt.want {
			t.Errorf("%s: AppendTokens = %v (reason %s), want reason %s", tt.name, err, got, tt.want)
		}
	}
	if _, err := tokens.AppendTokens(nil, "plain", &Parsed{Prompt: "hi"}); err != nil {
		t.Errorf("AppendTokens(plain completion) = %v", err)
	}
	miss := h.Missing()
	if len(miss) != 2 || miss[0].Model != "nope" || miss[1].Part != PartChatTemplate {
		t.Errorf("Missing() = %+v, want nope's tokenizer and plain's chat template", miss)
	}
}

// BenchmarkHealthSet is what every request of a model pays to tell Health
// its part is there, or still missing for the same reason: a read lock and
// a map lookup (missing: and errors.Is for the reason). 2 cores (AMD EPYC,
// shared with other work, so the spread), RunParallel, -count 3:
//
//	ready     27–72 ns/op  0 B/op  0 allocs/op
//	missing  108–134 ns/op  0 B/op  0 allocs/op
func BenchmarkHealthSet(b *testing.B) {
	missing := fmt.Errorf("%w \"Qwen/Qwen3-0.6B\"", tokenizer.ErrUnknownModel)
	for _, bc := range []struct {
		name string
		err  error
	}{{"ready", nil}, {"missing", missing}} {
		b.Run(bc.name, func(b *testing.B) {
			h, err := NewHealth(slog.New(slog.DiscardHandler), nil)
			if err != nil {
				b.Fatal(err)
			}
			h.Set("Qwen/Qwen3-0.6B", PartTokenizer, bc.err)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					h.Set("Qwen/Qwen3-0.6B", PartTokenizer, bc.err)
				}
			})
		})
	}
}
