package tokenizer

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kvrouter/kvrouter/internal/tracing"
	"github.com/kvrouter/kvrouter/tokenizer/hubtest"
)

// TestDownloadSpan: with tracing on, a tokenizer download is a span
// kvrouter.tokenizer.download naming the model and its hub repository; a
// model already in the cache downloads nothing and records none.
func TestDownloadSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	for range 2 {
		if _, err := r.Fetch(t.Context(), "Org/Tiny"); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "kvrouter.tokenizer.download" {
		t.Fatalf("spans %v, want one kvrouter.tokenizer.download", spans)
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["kvrouter.model"] != "Org/Tiny" || attrs["kvrouter.hub_repository"] == "" {
		t.Errorf("span attributes %v, want the model and its repository", attrs)
	}
}
