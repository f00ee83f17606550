package kvevents

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kvrouter/kvrouter/internal/tracing"
)

// TestBatchSpans: with tracing on, a pod's event batches are traced one a
// second (kvrouter.events.batch, with the pod and its event count),
// however fast they arrive; off, none is.
func TestBatchSpans(t *testing.T) {
	empty := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0} // [0.0, [], nil]: a batch of no events
	f := newApplyFixture(t)
	rec := tracetest.NewSpanRecorder()
	for range 3 {
		if err := f.a.applyPayload(empty); err != nil {
			t.Fatal(err)
		}
	}
	uninstall := tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer uninstall()
	for range 5 {
		if err := f.a.applyPayload(empty); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "kvrouter.events.batch" {
		t.Fatalf("spans %v, want one kvrouter.events.batch for five batches within a second", spans)
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["kvrouter.pod"] != "pod-a" || attrs["kvrouter.events"] != "0" {
		t.Errorf("span attributes %v, want the pod and its 0 events", attrs)
	}
}
