package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// TestDebugPodsMetricsState: /debug/pods tells a pod whose figures are
// fresh from one whose metrics never answered or went stale.
func TestDebugPodsMetricsState(t *testing.T) {
	c := defaultConfig()
	c.Routing.StaleMetricsAfter = duration(10 * time.Second)
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(s, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, name := range []string{"fresh", "never", "pending", "stale"} {
		a.fleet.Upsert(pod.Pod{Name: name, IP: "10.0.0.1", Port: 8000 + i, Model: "m", Ready: true})
	}
	a.fleet.Load("fresh").ScrapedAt.Store(now.Add(-time.Second).UnixNano())
	a.fleet.Load("never").FailingSince.Store(now.Add(-time.Second).UnixNano())
	a.fleet.Load("stale").ScrapedAt.Store(now.Add(-time.Minute).UnixNano())
	a.fleet.Load("stale").FailingSince.Store(now.Add(-time.Minute + time.Second).UnixNano())

	rec := httptest.NewRecorder()
	a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pods", nil))
	var got []struct {
		Name         string     `json:"name"`
		Metrics      string     `json:"metrics"`
		ScrapedAt    *time.Time `json:"metrics_scraped_at"`
		FailingSince *time.Time `json:"metrics_failing_since"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/debug/pods: %v: %s", err, rec.Body)
	}
	want := map[string]string{"fresh": "ok", "never": "never", "pending": "pending", "stale": "stale"}
	for _, p := range got {
		if p.Metrics != want[p.Name] {
			t.Errorf("/debug/pods %s: metrics %q, want %q", p.Name, p.Metrics, want[p.Name])
		}
		if (p.ScrapedAt != nil) != (p.Name == "fresh" || p.Name == "stale") {
			t.Errorf("/debug/pods %s: metrics_scraped_at %v", p.Name, p.ScrapedAt)
		}
		if (p.FailingSince != nil) != (p.Name == "never" || p.Name == "stale") {
			t.Errorf("/debug/pods %s: metrics_failing_since %v", p.Name, p.FailingSince)
		}
	}
	if len(got) != 4 {
		t.Errorf("/debug/pods = %d pods, want 4", len(got))
	}
	if p := got[0]; p.ScrapedAt == nil || !p.ScrapedAt.Equal(now.Add(-time.Second)) {
		t.Errorf("/debug/pods fresh: metrics_scraped_at %v, want %v", p.ScrapedAt, now.Add(-time.Second))
	}
}
