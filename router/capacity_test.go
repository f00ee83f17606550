package router

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// TestScaleFromZero: with routing.scale_from_zero_wait, a request for a
// model whose pods are all gone waits, counted in waiting_requests, until
// a pod of the model is ready, and is routed to it; with none it gets the
// 503 it got before once the wait is over; a model no pod ever served and
// none is configured for is refused at once.
func TestScaleFromZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTestRouter(t)
		tr.cfg.ScaleFromZeroWait = time.Minute
		tr.fleet.Remove("d") // qwen's only pod: the pool is at zero
		req := Request{Path: "/v1/completions", Body: []byte(completion("qwen", "a prompt for a pool at zero", ""))}
		waiting := tr.metrics.waiting.WithLabelValues("qwen")
		done := make(chan *Decision, 1)
		go func() {
			d, err := tr.Route(context.Background(), req)
			if err != nil {
				t.Error(err)
			}
			done <- d
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := testutil.ToFloat64(waiting); n != 1 || len(done) != 0 {
			t.Fatalf("10 s into the wait: waiting_requests{qwen} = %v, %d decisions; want 1 waiting, none", n, len(done))
		}
		tr.fleet.Upsert(pod.Pod{Name: "e", IP: "10.0.0.5", Port: 8000, Model: "qwen", Ready: false})
		synctest.Wait()
		if len(done) != 0 {
			t.Fatal("routed to a pod that is not ready")
		}
		tr.fleet.Upsert(pod.Pod{Name: "e", IP: "10.0.0.5", Port: 8000, Model: "qwen", Ready: true})
		if d := <-done; d == nil || d.Pod != "e" {
			t.Fatalf("decision once e is ready = %+v, want e", d)
		}
		if n := testutil.ToFloat64(tr.metrics.capacityWaits.WithLabelValues("routed")); n != 1 {
			t.Errorf("capacity_waits_total{routed} = %v, want 1", n)
		}
		if n := testutil.ToFloat64(waiting); n != 0 {
			t.Errorf("waiting_requests{qwen} after the wait = %v, want 0", n)
		}

		tr.fleet.Remove("e") // and none comes back
		start := time.Now()
		_, err := tr.Route(context.Background(), req)
		if e := AsError(err); e == nil || e.Status != http.StatusServiceUnavailable || time.Since(start) != time.Minute {
			t.Fatalf("with no pod coming: %v after %v; want 503 after the minute's wait", err, time.Since(start))
		}
		if n := testutil.ToFloat64(tr.metrics.capacityWaits.WithLabelValues("timeout")); n != 1 {
			t.Errorf("capacity_waits_total{timeout} = %v, want 1", n)
		}

		start = time.Now()
		_, err = tr.Route(context.Background(), Request{Path: "/v1/completions", Body: []byte(completion("mistral", "never served", ""))})
		if e := AsError(err); e == nil || e.Status != http.StatusNotFound || time.Since(start) != 0 {
			t.Fatalf("a model never served: %v after %v; want 404 at once", err, time.Since(start))
		}
	})
}
