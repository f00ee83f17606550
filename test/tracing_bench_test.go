package test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/internal/tracing"
	"github.com/kvrouter/kvrouter/router"
)

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkDecisionTracing is BenchmarkDecision's 8k-token chat through the
// router with tracing off (the default: no span is started), on with a
// parent-based 10% sampler (root requests, batched export), and on with
// every request sampled.
func BenchmarkDecisionTracing(b *testing.B) {
	prompt := benchPrompt(8000)
	var msgs string
	for i, part := range chunk(prompt, 10) {
		msgs += fmt.Sprintf(`,{"role":%q,"content":%q}`, [2]string{"user", "assistant"}[i%2], part)
	}
	body := []byte(`{"model":"qwen3","messages":[{"role":"system","content":"You are helpful."}` + msgs + `]}`)
	rig := newBenchRig(b, prompt)
	for _, bc := range []struct {
		name     string
		provider trace.TracerProvider
	}{
		{"off", nil},
		{"ratio-0.1", sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))))},
		{"always", sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.provider != nil {
				stop := tracing.Install(bc.provider)
				b.Cleanup(stop)
			}
			b.ReportAllocs()
			for b.Loop() {
				d, err := rig.router.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: body})
				if err != nil || d.Tokens < 7200 {
					b.Fatalf("Route = %+v, %v", d, err)
				}
				d.Done()
			}
		})
	}
}
