package redisindex

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/internal/tracing"
	"github.com/kvrouter/kvrouter/kvindex"
)

// TestRoundTripSpans: with tracing on, Redis round trips are traced one of
// each operation a second (kvrouter.redis.match here, however many
// matches); off, none is.
func TestRoundTripSpans(t *testing.T) {
	srv := redisserver.New(t)
	a := newReplica(t, srv.Addr, "a", nil)
	ids := []kvindex.PodID{a.pods["p1"], a.pods["p2"]}
	must(t, a.Stored(ids[0], kvindex.TierGPU, blocks[:3]))
	a.Match("m", blocks[:3], ids, nil) // off: nothing recorded
	rec := tracetest.NewSpanRecorder()
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
	for range 5 {
		a.Match("m", blocks[:3], ids, nil)
	}
	var matches int
	for _, s := range rec.Ended() {
		if s.Name() == "kvrouter.redis.match" {
			matches++
		}
	}
	if matches != 1 {
		t.Errorf("%d kvrouter.redis.match spans for five matches within a second (all spans: %v), want 1", matches, rec.Ended())
	}
}
