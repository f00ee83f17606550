package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
)

const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-0.6B"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="2000",prefix_caching_hash_algo="sha256"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="1",gpu_memory_utilization="0.45",kv_cache_size_tokens="218464",num_gpu_blocks="24978",prefix_caching_hash_algo="sha256",sliding_window="None"} 1.0
vllm:num_requests_waiting_by_reason{reason="capacity"} 99
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.2e+06
vllm:prompt_tokens_created{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.7e+09
vllm:prompt_tokens_total{engine="1",model_name="Qwen/Qwen3-0.6B"} 3000
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 1.2e+06
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 400000
vllm:external_prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 50000
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.3",model_name="Qwen/Qwen3-0.6B"} 9
vllm:request_prefill_time_seconds_sum{engine="0",model_name="Qwen/Qwen3-0.6B"} 80.5
vllm:request_prefill_time_seconds_count{engine="0",model_name="Qwen/Qwen3-0.6B"} 10
`

// engine0, engine1 and both are vllmMetrics' prefill counters.
var (
	engine0 = Counters{PromptTokens: 1.2e6, CacheQueries: 1.2e6, CacheHits: 400000, ExternalHits: 50000, PrefillSeconds: 80.5, Prefills: 10, Has: HasPromptTokens | HasCacheQueries | HasCacheHits | HasExternalHits | HasPrefillSeconds | HasPrefills}
	engine1 = Counters{PromptTokens: 3000, Has: HasPromptTokens}
	both    = Counters{PromptTokens: 1.2e6 + 3000, CacheQueries: 1.2e6, CacheHits: 400000, ExternalHits: 50000, PrefillSeconds: 80.5, Prefills: 10, Has: engine0.Has}
)

func TestParseVLLMMetrics(t *testing.T) {
	tests := []struct {
		in   string
		want Queue
	}{
		{vllmMetrics, Queue{Waiting: 7, Running: 5, KVUsage: 0.5, KVTokens: 32000 + 218464, Counters: both}},
		{"vllm:gpu_cache_usage_perc 0.75\n", Queue{Waiting: -1, Running: -1, KVUsage: 0.75, KVTokens: -1}},
		{"", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
		{"vllm:num_requests_waiting{} NaN\nvllm:num_requests_running garbage\n", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
		// cache_config_info: the size label where it is a count, the
		// blocks' tokens otherwise, nothing from labels that are not.
		{`vllm:cache_config_info{block_size="16",kv_cache_size_tokens="None",num_gpu_blocks="100"} 1.0` + "\n", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: 1600}},
		{`vllm:cache_config_info{block_size="16",kv_cache_size_tokens="0",num_gpu_blocks="None"} 1.0` + "\n", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
		{`vllm:cache_config_info{block_size="-16",num_gpu_blocks="100"} 1` + "\n" + `vllm:cache_config_info{block_size="16"} 1` + "\n", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
		{`vllm:cache_config_info{block_size="1099511627776",num_gpu_blocks="1099511627776"} 1` + "\n", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
	}
	for _, tt := range tests {
		if got := ParseVLLMMetrics(strings.NewReader(tt.in)); got != tt.want {
			t.Errorf("ParseVLLMMetrics(%.40q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// TestParseVLLMEngines checks the figures of one data-parallel
// rank: its engine's series only, a series without the label counting for
// every engine, and label values read with their escapes.
func TestParseVLLMEngines(t *testing.T) {
	tests := []struct {
		in, engine string
		want       Queue
	}{
		{vllmMetrics, "0", Queue{Waiting: 7, Running: 3, KVUsage: 0.25, KVTokens: 32000, Counters: engine0}},
		{vllmMetrics, "1", Queue{Waiting: -1, Running: 2, KVUsage: 0.5, KVTokens: 218464, Counters: engine1}},
		{vllmMetrics, "2", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
		{vllmMetrics, "", Queue{Waiting: 7, Running: 5, KVUsage: 0.5, KVTokens: 32000 + 218464, Counters: both}},
		{"vllm:prompt_tokens_total 5\nvllm:prompt_tokens_total{engine=\"1\"} 7\n", "1", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1, Counters: Counters{PromptTokens: 12, Has: HasPromptTokens}}},
		{"vllm:num_requests_waiting{model_name=\"m\"} 4\n", "3", Queue{Waiting: 4, Running: -1, KVUsage: -1, KVTokens: -1}},
		{`vllm:num_requests_waiting{model_name="a\",engine=\"1",engine="0"} 4` + "\n", "1", Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}},
		{`vllm:num_requests_waiting{model_name="a\",engine=\"1",engine="0"} 4` + "\n", "0", Queue{Waiting: 4, Running: -1, KVUsage: -1, KVTokens: -1}},
	}
	for _, tt := range tests {
		all, engines, err := ParseVLLMEngines(strings.NewReader(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		got := all
		if tt.engine != "" {
			got = engines.Of(tt.engine)
		}
		if got != tt.want {
			t.Errorf("ParseVLLMEngines(%.60q).Of(%q) = %+v, want %+v", tt.in, tt.engine, got, tt.want)
		}
	}
}

func TestScraperFeedsLoad(t *testing.T) {
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet := New(index)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, vllmMetrics)
	}))
	defer srv.Close()
	fleet.Upsert(podAt(t, "a", strings.TrimPrefix(srv.URL, "http://")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s, err := NewScraper(fleet, nil, time.Millisecond, DefaultStaleAfter, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- s.Run(ctx) }()
	l := fleet.Load("a")
	deadline := time.Now().Add(10 * time.Second) // a hang guard, not a performance bound
	for l.Waiting.Load() != 7 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a real HTTP scrape
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l.Waiting.Load() != 7 || l.Running.Load() != 5 || l.KVUsagePermille.Load() != 500 || l.KVCapacity.Load() != 32000+218464 {
		t.Fatalf("load after scraping = waiting %d running %d kv %d‰ of %d tokens, want 7, 5, 500‰ of %d", l.Waiting.Load(), l.Running.Load(), l.KVUsagePermille.Load(), l.KVCapacity.Load(), 32000+218464)
	}
}

// TestScraperRanksShareOneScrape: the ranks of a data-parallel server are
// candidates of their own, but its /metrics is fetched once a round, by its
// rank 0, for all of them; each rank's Load gets its engine's figures, and
// the others count as scraped.
func TestScraperRanksShareOneScrape(t *testing.T) {
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet := New(index)
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		scrapes.Add(1)
		fmt.Fprint(w, vllmMetrics)
	}))
	defer srv.Close()
	server := podAt(t, "a", strings.TrimPrefix(srv.URL, "http://"))
	server.DPSize = 3
	for _, r := range pod.Ranks(server) {
		fleet.Upsert(r)
	}
	s, err := NewScraper(fleet, nil, 10*time.Millisecond, DefaultStaleAfter, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	for phase := range scrapePhases { // one round
		s.scrapePhase(context.Background(), phase, time.Now())
	}
	s.wg.Wait()
	if n := scrapes.Load(); n != 1 {
		t.Errorf("%d scrapes of the server in one round, want 1 for its three ranks", n)
	}
	r0, r1, r2 := fleet.Load("a"), fleet.Load("a:rank-1"), fleet.Load("a:rank-2")
	if r0.Waiting.Load() != 7 || r0.Running.Load() != 3 || r0.KVUsagePermille.Load() != 250 ||
		r1.Running.Load() != 2 || r1.KVUsagePermille.Load() != 500 || r2.ScrapedAt.Load() == 0 || r2.Running.Load() != 0 {
		t.Errorf("ranks' loads: 0: %d/%d/%d‰, 1: running %d kv %d‰, 2: scraped %v running %d; want each its engine's",
			r0.Waiting.Load(), r0.Running.Load(), r0.KVUsagePermille.Load(), r1.Running.Load(), r1.KVUsagePermille.Load(), r2.ScrapedAt.Load() != 0, r2.Running.Load())
	}
}

// podAt is a ready pod named name serving llama at hostport.
func podAt(t *testing.T, name, hostport string) pod.Pod {
	t.Helper()
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return pod.Pod{Name: name, IP: host, Port: n, Model: "llama", Ready: true}
}

// fakePods answers scrapes in memory: each pod's answer comes from fn, and
// every request is counted by host and by the instant it started.
type fakePods struct {
	mu     sync.Mutex
	byHost map[string]int
	starts map[time.Time]int
	fn     func(req *http.Request) (*http.Response, error)
}

func (f *fakePods) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.byHost[req.URL.Host]++
	f.starts[time.Now()]++
	f.mu.Unlock()
	return f.fn(req)
}

func (f *fakePods) count(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byHost[host]
}

func metricsResponse(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(vllmMetrics)), Request: req}, nil
}

// scrapeFleet is n ready pods at 10.1.0.i:8000 and a scraper of them
// through pods, every 100ms.
func scrapeFleet(t *testing.T, n int, pods *fakePods) (*Fleet, *Scraper) {
	t.Helper()
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet := New(index)
	for i := range n {
		fleet.Upsert(podAt(t, fmt.Sprintf("p%d", i), fmt.Sprintf("10.1.0.%d:8000", i)))
	}
	pods.byHost, pods.starts = map[string]int{}, map[time.Time]int{}
	s, err := NewScraper(fleet, &http.Client{Transport: pods}, 100*time.Millisecond, DefaultStaleAfter, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return fleet, s
}

// checkLearned checks each named pod's learned seconds per token
// against want, within 5%.
func checkLearned(t *testing.T, fleet *Fleet, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		sp := fleet.Load(name).Speed()
		if sp == nil {
			t.Errorf("%s: nothing learned in 30s", name)
			continue
		}
		if got := sp.Busy / sp.Tokens; !near(got, w, 0.05) {
			t.Errorf("%s: learned %.0f tokens/s, want %.0f ±5%%", name, 1/got, 1/w)
		}
	}
}

// runFor runs s for d of the bubble's fake time and waits for it to return.
func runFor(t *testing.T, s *Scraper, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestScraperSpreadsRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pods := &fakePods{fn: metricsResponse}
		_, s := scrapeFleet(t, 40, pods)
		runFor(t, s, time.Second+time.Millisecond)
		for i := range 40 {
			host := fmt.Sprintf("10.1.0.%d:8000", i)
			if n := pods.count(host); n < 10 || n > 11 {
				t.Errorf("scrapes of %s in 1s at a 100ms interval = %d, want 10 or 11", host, n)
			}
		}
		for at, n := range pods.starts {
			if n > 40/scrapePhases {
				t.Errorf("scrapes started at %s = %d, want at most %d (a round spread over %d slots)", at, n, 40/scrapePhases, scrapePhases)
			}
		}
	})
}

func TestScraperSlowPodDelaysOnlyItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inFlight, most atomic.Int32
		pods := &fakePods{fn: func(req *http.Request) (*http.Response, error) {
			if req.URL.Host != "10.1.0.0:8000" {
				return metricsResponse(req)
			}
			most.Store(max(most.Load(), inFlight.Add(1)))
			defer inFlight.Add(-1)
			select { // hangs until the scrape's own deadline
			case <-req.Context().Done():
				return nil, req.Context().Err()
			case <-time.After(time.Hour):
				return metricsResponse(req)
			}
		}}
		_, s := scrapeFleet(t, 4, pods)
		runFor(t, s, 3*time.Second)
		for i := 1; i < 4; i++ {
			if n := pods.count(fmt.Sprintf("10.1.0.%d:8000", i)); n < 29 {
				t.Errorf("scrapes of a healthy pod beside a hung one in 3s = %d, want >= 29", n)
			}
		}
		if most.Load() != 1 {
			t.Errorf("concurrent scrapes of the hung pod = %d, want 1", most.Load())
		}
	})
}

func TestScraperBacksOffFailingPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		pods := &fakePods{fn: func(req *http.Request) (*http.Response, error) {
			if req.URL.Host == "10.1.0.0:8000" && down.Load() {
				return nil, errors.New("connection refused")
			}
			return metricsResponse(req)
		}}
		fleet, s := scrapeFleet(t, 2, pods)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		// Waits of 0.1, 0.2, 0.4 … 3.2 s, then 5 s: about 10 tries in 20 s.
		if n := pods.count("10.1.0.0:8000"); n < 6 || n > 12 {
			t.Errorf("scrapes of a refusing pod in 20s = %d, want 6..12 (backing off to %s)", n, maxScrapeBackoff)
		}
		if fleet.Load("p0").Waiting.Load() != 0 {
			t.Errorf("refusing pod's waiting = %d, want 0 (never scraped)", fleet.Load("p0").Waiting.Load())
		}
		if got, want := testutil.ToFloat64(s.scrapes.WithLabelValues("failed")), float64(pods.count("10.1.0.0:8000")); got != want {
			t.Errorf("metrics_scrapes_total{failed} = %g, want %g (every scrape of the refusing pod)", got, want)
		}
		if got := testutil.ToFloat64(s.failing); got != 1 {
			t.Errorf("metrics_failing_pods while one pod refuses = %g, want 1", got)
		}
		down.Store(false)
		time.Sleep(maxScrapeBackoff + 200*time.Millisecond)
		synctest.Wait()
		if got := fleet.Load("p0").Waiting.Load(); got != 7 {
			t.Errorf("waiting of a pod back up %s later = %d, want 7", maxScrapeBackoff, got)
		}
		before := pods.count("10.1.0.0:8000")
		time.Sleep(time.Second)
		synctest.Wait()
		if n := pods.count("10.1.0.0:8000") - before; n < 9 {
			t.Errorf("scrapes of a recovered pod in 1s = %d, want >= 9 (backoff cleared)", n)
		}
		if got := testutil.ToFloat64(s.failing); got != 0 {
			t.Errorf("metrics_failing_pods after the pod recovered = %g, want 0", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestScraperForgetsPodsThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pods := &fakePods{fn: metricsResponse}
		fleet, s := scrapeFleet(t, 5, pods)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(150 * time.Millisecond)
		for i := range 4 {
			fleet.Remove(fmt.Sprintf("p%d", i))
		}
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		before := pods.count("10.1.0.0:8000")
		time.Sleep(time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := pods.count("10.1.0.0:8000") - before; n != 0 {
			t.Errorf("scrapes of a removed pod = %d, want 0", n)
		}
		if len(s.pods) != 1 {
			t.Errorf("pods the scraper tracks after 4 of 5 left = %d, want 1", len(s.pods))
		}
	})
}

func TestScraperStampsFreshness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		pods := &fakePods{fn: func(req *http.Request) (*http.Response, error) {
			if req.URL.Host == "10.1.0.0:8000" || down.Load() {
				return nil, errors.New("connection refused")
			}
			return metricsResponse(req)
		}}
		fleet, s := scrapeFleet(t, 2, pods)
		s.staleAfter = 2 * time.Second // as NewScraper(…, 2*time.Second, …) sets it
		never, seen := fleet.Load("p0"), fleet.Load("p1")
		if fleet.Scraped() || never.Metrics(time.Now(), time.Second) != MetricsPending {
			t.Fatalf("before Run: scraped %v, p0 %v; want false, pending", fleet.Scraped(), never.Metrics(time.Now(), time.Second))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		start := time.Now()
		time.Sleep(time.Second)
		synctest.Wait()
		if !fleet.Scraped() {
			t.Error("fleet.Scraped() under a running scraper = false")
		}
		if at, since := never.ScrapedAt.Load(), never.FailingSince.Load(); at != 0 || since != start.UnixNano() {
			t.Errorf("refusing pod: ScrapedAt %d, FailingSince %d; want 0, %d (its first failure)", at, since, start.UnixNano())
		}
		if got := never.Metrics(time.Now(), 2*time.Second); got != MetricsNever || !got.Blind() {
			t.Errorf("refusing pod's metrics = %v, want never (blind)", got)
		}
		if at, since := seen.ScrapedAt.Load(), seen.FailingSince.Load(); at < time.Now().Add(-100*time.Millisecond).UnixNano() || since != 0 {
			t.Errorf("answering pod: ScrapedAt %s ago, FailingSince %d; want within 100ms, 0", time.Since(time.Unix(0, at)), since)
		}
		if got := testutil.ToFloat64(s.blind); got != 1 {
			t.Errorf("metrics_blind_pods with one pod never scraped = %g, want 1", got)
		}
		down.Store(true)
		failed := time.Now()
		time.Sleep(time.Second)
		synctest.Wait()
		if since := seen.FailingSince.Load(); since < failed.UnixNano() || since > failed.Add(200*time.Millisecond).UnixNano() {
			t.Errorf("pod down since %s: FailingSince %s", failed, time.Unix(0, since))
		}
		if got := seen.Metrics(time.Now(), 2*time.Second); got != MetricsOK {
			t.Errorf("pod failing for 1s of a 2s bound = %v, want ok", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := seen.Metrics(time.Now(), 2*time.Second); got != MetricsStale {
			t.Errorf("pod failing for 3s of a 2s bound = %v, want stale", got)
		}
		if got := testutil.ToFloat64(s.blind); got != 2 {
			t.Errorf("metrics_blind_pods with one pod never scraped and one stale = %g, want 2", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// cutReader gives its text, then fails as a connection reset mid-body does.
type cutReader struct{ r io.Reader }

func (c cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// TestScraperRefusesCutPage: a /metrics body cut short (found by the wire
// fault tests: a proxy that closed the connection after 300 bytes) ends
// in a figure of fewer digits than the pod sent, which parsed as whole;
// now the scrape fails and nothing of it is kept.
func TestScraperRefusesCutPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pods := &fakePods{fn: func(req *http.Request) (*http.Response, error) {
			body := "vllm:num_requests_running 3\nvllm:num_requests_waiting 1" // of 12
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(cutReader{strings.NewReader(body)}), Request: req}, nil
		}}
		fleet, s := scrapeFleet(t, 1, pods)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if l := fleet.Load("p0"); l.Waiting.Load() != 0 || l.Running.Load() != 0 {
			t.Errorf("load after cut pages = waiting %d running %d, want 0 and 0 (nothing kept)", l.Waiting.Load(), l.Running.Load())
		}
		if got := testutil.ToFloat64(s.failing); got != 1 {
			t.Errorf("metrics_failing_pods while the pod's pages are cut = %g, want 1", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestEngineMetrics reads SGLang's and TensorRT-LLM's queue, running and KV
// use series (the names the Gateway API Inference Extension's model server
// protocol gives them), and SGLang's cache size from its page labels.
func TestEngineMetrics(t *testing.T) {
	for name, page := range map[string]string{
		"sglang": `# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 3
sglang:num_running_reqs{model_name="m"} 5
sglang:token_usage{model_name="m"} 0.25
sglang:cache_config_info{page_size="16",num_pages="1000"} 1
`,
		"trtllm": `trtllm_num_requests_waiting{model_name="m"} 3
trtllm_num_requests_running{model_name="m"} 5
trtllm_kv_cache_utilization{model_name="m"} 0.25
`,
	} {
		q, _, err := ParseVLLMEngines(strings.NewReader(page))
		if err != nil {
			t.Fatal(err)
		}
		wantTokens := int64(-1)
		if name == "sglang" {
			wantTokens = 16000
		}
		if q.Waiting != 3 || q.Running != 5 || q.KVUsage != 0.25 || q.KVTokens != wantTokens {
			t.Errorf("%s: %+v, want 3 waiting, 5 running, 0.25 used, %d tokens", name, q, wantTokens)
		}
	}
	if metricsPath("trtllm") != "/prometheus/metrics" || metricsPath("sglang") != "/metrics" || metricsPath("") != "/metrics" {
		t.Error("metrics paths")
	}
}
