package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsTransport answers the scrapes of pod x (10.2.0.1) with a busy
// queue and of pod y (10.2.0.2) with an idle one, or fails them while
// yDown is set.
type metricsTransport struct{ yDown atomic.Bool }

func (m *metricsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body := "vllm:num_requests_waiting 2\nvllm:num_requests_running 20\n"
	if strings.HasPrefix(req.URL.Host, "10.2.0.2:") {
		if m.yDown.Load() {
			return nil, errors.New("connection refused")
		}
		body = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// scrapedRouter is a router over pods x and y serving "llama", scraped
// every 100ms through tr. Call it in a synctest bubble; the scraper stops
// when the test ends.
func scrapedRouter(t *testing.T, cfg Config, tr http.RoundTripper) *Router {
	t.Helper()
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fl := fleet.New(index)
	fl.Upsert(pod.Pod{Name: "x", IP: "10.2.0.1", Port: 8000, Model: "llama", Ready: true})
	fl.Upsert(pod.Pod{Name: "y", IP: "10.2.0.2", Port: 8000, Model: "llama", Ready: true})
	hasher, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256, Seed: "vllm-none-hash", BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg, fl, index, hasher, byteTokens{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s, err := fleet.NewScraper(fl, &http.Client{Transport: tr}, 100*time.Millisecond, fleet.DefaultStaleAfter, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r
}

// picks routes n requests and counts the pods chosen.
func picks(t *testing.T, r *Router, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		d, err := r.Route(context.Background(), Request{Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
		if err != nil {
			t.Fatal(err)
		}
		got[d.Pod]++
		d.Done()
	}
	return got
}

func TestNeverScrapedPodIsNotChosen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &metricsTransport{}
		tr.yDown.Store(true)
		r := scrapedRouter(t, DefaultConfig(), tr)
		time.Sleep(time.Second)
		synctest.Wait()
		if w := r.fleet.Load("y").Waiting.Load(); w != 0 {
			t.Fatalf("y's waiting = %d, want 0: it never answered", w)
		}
		if got := picks(t, r, 20); got["x"] != 20 {
			t.Errorf("picks beside a pod whose metrics never answered = %v, want all 20 on x (busy, but seen)", got)
		}
	})
}

func TestAllBlindStillRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := scrapedRouter(t, DefaultConfig(), roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("connection refused")
		}))
		time.Sleep(time.Second)
		synctest.Wait()
		// Routed by kvrouter's own counts: the pods share the requests.
		got := map[string]int{}
		var ds []*Decision
		for range 20 {
			d, err := r.Route(context.Background(), Request{Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
			if err != nil {
				t.Fatalf("route with every pod's metrics down: %v", err)
			}
			got[d.Pod]++
			ds = append(ds, d)
		}
		for _, d := range ds {
			d.Done()
		}
		if got["x"] == 0 || got["y"] == 0 {
			t.Errorf("picks with every pod blind = %v, want both used (in-flight counts still spread them)", got)
		}
	})
}

func TestStaleMetricsAfterBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.StaleMetricsAfter = 2 * time.Second
		tr := &metricsTransport{}
		r := scrapedRouter(t, cfg, tr)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := picks(t, r, 10); got["y"] != 10 {
			t.Fatalf("picks while y answers idle = %v, want all 10 on y", got)
		}
		tr.yDown.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := picks(t, r, 10); got["y"] != 10 {
			t.Errorf("picks 1s into y's failures (bound 2s) = %v, want all 10 on y (last figures)", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := picks(t, r, 10); got["x"] != 10 {
			t.Errorf("picks 3s into y's failures (bound 2s) = %v, want all 10 on x", got)
		}
		tr.yDown.Store(false)
		time.Sleep(6 * time.Second) // past the longest backoff
		synctest.Wait()
		if got := picks(t, r, 10); got["y"] != 10 {
			t.Errorf("picks once y answers again = %v, want all 10 on y", got)
		}
	})
}

func TestStaleMetricsAfterZeroNeverStale(t *testing.T) {
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fl := fleet.New(index)
	fl.Upsert(pod.Pod{Name: "x", IP: "10.2.0.1", Port: 8000, Model: "llama", Ready: true})
	l, now := fl.Load("x"), time.Now()
	l.ScrapedAt.Store(now.Add(-time.Hour).UnixNano())
	l.FailingSince.Store(now.Add(-time.Minute).UnixNano())
	if got := l.Metrics(now, 0); got != fleet.MetricsOK {
		t.Errorf("figures failing for 1m with no bound = %v, want ok", got)
	}
	if got := l.Metrics(now, 10*time.Second); got != fleet.MetricsStale {
		t.Errorf("figures failing for 1m, bound 10s = %v, want stale", got)
	}
	cfg := DefaultConfig()
	cfg.StaleMetricsAfter = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "stale_metrics_after: -1s") {
		t.Errorf("Validate of a negative StaleMetricsAfter = %v, want an error naming it", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
