package router

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scraper reads each ready pod's vLLM /metrics about every Interval and
// keeps the queue the pod reports in its Load.
type Scraper struct {
	fleet    *Fleet
	client   *http.Client
	interval time.Duration
	logger   *slog.Logger
}

// NewScraper returns a scraper of fleet's pods; interval 0 means 100ms.
func NewScraper(fleet *Fleet, client *http.Client, interval time.Duration, logger *slog.Logger) *Scraper {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	return &Scraper{fleet: fleet, client: client, interval: interval, logger: logger}
}

// Run scrapes until ctx is done. A pod whose scrape fails keeps its last
// figures; failures are logged at Debug (vLLM restarts are routine).
func (s *Scraper) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.scrapeAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Scraper) scrapeAll(ctx context.Context) {
	snap := s.fleet.snap.Load()
	var wg sync.WaitGroup
	for _, m := range snap.pods {
		if !m.Ready {
			continue
		}
		wg.Go(func() {
			if err := s.scrape(ctx, m); err != nil && s.logger.Enabled(ctx, slog.LevelDebug) {
				s.logger.Debug("metrics scrape failed", "pod", m.Name, "error", err)
			}
		})
	}
	wg.Wait()
}

func (s *Scraper) scrape(ctx context.Context, m *member) error {
	ctx, cancel := context.WithTimeout(ctx, s.interval*10)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Address+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return &Error{Status: resp.StatusCode, Type: "metrics", Message: resp.Status}
	}
	q := ParseVLLMMetrics(io.LimitReader(resp.Body, 8<<20))
	if q.Waiting >= 0 {
		m.load.Waiting.Store(q.Waiting)
	}
	if q.Running >= 0 {
		m.load.Running.Store(q.Running)
	}
	if q.KVUsage >= 0 {
		m.load.KVUsagePermille.Store(int64(q.KVUsage * 1000))
	}
	return nil
}

// Queue is what a pod's metrics say of its load; -1 for a missing figure.
type Queue struct {
	Waiting, Running int64
	KVUsage          float64 // fraction of the KV cache in use
}

// ParseVLLMMetrics reads vLLM's Prometheus text exposition, summing series
// across labels (one per model or engine). Names of older releases
// (vllm:gpu_cache_usage_perc) are accepted.
func ParseVLLMMetrics(r io.Reader) Queue {
	q := Queue{Waiting: -1, Running: -1, KVUsage: -1}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		switch name {
		case "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc":
		default:
			continue
		}
		rest := line[len(name):]
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest) // value [timestamp]
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || v != v || v < 0 {
			continue
		}
		switch name {
		case "vllm:num_requests_waiting":
			q.Waiting = max(q.Waiting, 0) + int64(v)
		case "vllm:num_requests_running":
			q.Running = max(q.Running, 0) + int64(v)
		default: // the fullest engine's cache
			q.KVUsage = max(q.KVUsage, v)
		}
	}
	return q
}
