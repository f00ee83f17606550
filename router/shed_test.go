package router

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestShedding: when every candidate pod is saturated (waiting queue or KV
// cache past the thresholds), a request whose objective has a negative
// priority gets 429 with Retry-After, counted by objective; priority zero
// and above, no objective or an unknown one (counted) are never shed; one
// pod below the thresholds and nothing is shed.
func TestShedding(t *testing.T) {
	tr := newTestRouter(t) // llama on a, b, c
	tr.SetObjectives(Objectives{"batch": -1, "chat": 10})
	set := func(waiting, kvPermille int64) {
		for _, p := range []string{"a", "b", "c"} {
			tr.fleet.Load(p).Waiting.Store(waiting)
			tr.fleet.Load(p).KVUsagePermille.Store(kvPermille)
		}
	}
	route := func(objective string) *Error {
		t.Helper()
		d, err := tr.Route(t.Context(), Request{Path: "/v1/completions", Body: []byte(completion("llama", "x", "")), Objective: objective})
		if err != nil {
			e := AsError(err)
			if e == nil {
				t.Fatal(err)
			}
			return e
		}
		d.Done()
		return nil
	}
	set(5, 0) // queues at the threshold
	e := route("batch")
	if e == nil || e.Status != http.StatusTooManyRequests || e.RetryAfter != time.Second {
		t.Fatalf("a sheddable request on a saturated fleet = %v, want 429 with Retry-After", e)
	}
	for _, o := range []string{"chat", "", "mystery"} {
		if e := route(o); e != nil {
			t.Errorf("objective %q on a saturated fleet = %v, want routed: priority >= 0 is never shed", o, e)
		}
	}
	set(0, 800) // KV caches at the threshold
	if e := route("batch"); e == nil || e.Status != http.StatusTooManyRequests {
		t.Errorf("a sheddable request with every KV cache full = %v, want 429", e)
	}
	tr.fleet.Load("b").KVUsagePermille.Store(500)
	if e := route("batch"); e != nil {
		t.Errorf("a sheddable request with one pod below the thresholds = %v, want routed", e)
	}
	set(0, 0)
	if e := route("batch"); e != nil {
		t.Errorf("a sheddable request on an idle fleet = %v, want routed", e)
	}
	if got := testutil.ToFloat64(tr.metrics.shed.WithLabelValues("batch")); got != 2 {
		t.Errorf("shed{batch} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(tr.metrics.unknownObjectives); got != 1 {
		t.Errorf("unknown objectives = %v, want 1", got)
	}
}
