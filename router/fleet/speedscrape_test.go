package fleet

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
)

// countersText is c in vLLM's exposition, as an engine's series.
func countersText(c Counters) string {
	return fmt.Sprintf(`vllm:num_requests_running{engine="0",model_name="m"} 1
vllm:prompt_tokens_total{engine="0",model_name="m"} %g
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %g
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %g
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} %g
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} %g
`, c.PromptTokens, c.CacheQueries, c.CacheHits, c.PrefillSeconds, c.Prefills)
}

// TestScraperLearnsSpeed checks that the scraper learns each pod's prefill
// speed from its counters into its Load, a pod at half the speed at half.
func TestScraperLearnsSpeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const c = 1.0 / 8000
		start := time.Now()
		pods := &fakePods{fn: func(req *http.Request) (*http.Response, error) {
			p := sharedPod{c: c, u: 1000, hit: 500, k: 3, period: 1000 * c}
			if req.URL.Host == "10.1.0.1:8000" {
				p.c, p.period = 2*c, 2000*c
			}
			body := countersText(p.at(time.Since(start).Seconds(), Counters{}))
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
		}}
		fleet, s := scrapeFleet(t, 2, pods)
		if sp := fleet.Load("p0").Speed(); sp != nil {
			t.Fatalf("speed before any scrape: %+v", *sp)
		}
		runFor(t, s, 30*time.Second)
		checkLearned(t, fleet, map[string]float64{"p0": c, "p1": 2 * c})
	})
}

// TestScraperLearnsEachRank: the ranks of a data-parallel server share one
// /metrics, but each rank's speed is learned from its own engine's
// counters: engine 1 at half engine 0's speed is learned at half.
func TestScraperLearnsEachRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const c = 1.0 / 8000
		start := time.Now()
		index, err := kvindex.New(kvindex.DefaultConfig(), nil)
		if err != nil {
			t.Fatal(err)
		}
		fleet := New(index)
		server := podAt(t, "a", "10.1.0.9:8000")
		server.DPSize = 2
		for _, r := range pod.Ranks(server) {
			fleet.Upsert(r)
		}
		pods := &fakePods{byHost: map[string]int{}, starts: map[time.Time]int{}, fn: func(req *http.Request) (*http.Response, error) {
			var body strings.Builder
			for engine, speed := range []float64{1, 0.5} {
				p := sharedPod{c: c / speed, u: 1000, k: 2, period: 1000 * c / speed}
				body.WriteString(strings.ReplaceAll(countersText(p.at(time.Since(start).Seconds(), Counters{})), `engine="0"`, fmt.Sprintf(`engine="%d"`, engine)))
			}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body.String())), Request: req}, nil
		}}
		s, err := NewScraper(fleet, &http.Client{Transport: pods}, 100*time.Millisecond, DefaultStaleAfter, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 30*time.Second)
		checkLearned(t, fleet, map[string]float64{"a": c, "a:rank-1": 2 * c})
	})
}
