package fleet

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Scraper reads each ready pod's vLLM /metrics about every interval and
// keeps the queue the pod reports in its Load.
//
// A round's scrapes are spread over the interval in scrapePhases slots, so
// a large fleet's answers do not all arrive, and parse, in one burst beside
// the routing decisions. Each scrape runs on its own goroutine: a slow pod
// delays only itself (it is skipped while its last scrape is running), and
// a pod whose scrape fails is tried again after a backoff that doubles from
// one interval up to maxScrapeBackoff.
type Scraper struct {
	fleet    *Fleet
	client   *http.Client
	interval time.Duration
	logger   *slog.Logger
	pods     map[*Load]*scrapeState // Run's goroutine only
	next     int                    // the phase the next new pod gets
	wg       sync.WaitGroup
	scrapes  *prometheus.CounterVec // by result
	ok, fail prometheus.Counter     // its two series
	failing  prometheus.Gauge
	blind    prometheus.Gauge
	// staleAfter is the bound past which a failing pod's figures are stale
	// (0: never), the router's Config.StaleMetricsAfter.
	staleAfter time.Duration
	// DefaultEngine is the engine of pods that name none (pod.Pod.Engine),
	// whose metrics page it reads; "" is vLLM. Set before Run.
	DefaultEngine string
}

// scrapePhases is the number of slots a round's scrapes are spread over.
const scrapePhases = 10

// maxScrapeBackoff bounds the wait before a failing pod is scraped again.
const maxScrapeBackoff = 5 * time.Second

// scrapeState is one pod's scraping: its slot in the round, whether a
// scrape is running, and the backoff after failures.
type scrapeState struct {
	phase    int
	seen     bool // in the fleet at the last pruning
	busy     atomic.Bool
	failures atomic.Int32 // consecutive
	retryAt  atomic.Int64 // unix nanoseconds; 0: scrape in its slot
	warned   atomic.Int64 // unix nanoseconds of the last WARN of a failing run
	// speed learns the pod's prefill speed; only the goroutine of the
	// pod's running scrape (its own, or its server's rank 0's) uses it.
	speed SpeedEstimator
}

// NewScraper returns a scraper of fleet's pods; interval 0 means 100ms.
// staleAfter is the bound past which a failing pod's figures count as stale
// in kvrouter_router_metrics_blind_pods (0: never), the router's
// Config.StaleMetricsAfter. Its metrics are registered in reg (nil: none).
func NewScraper(fleet *Fleet, client *http.Client, interval, staleAfter time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Scraper, error) {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	s := &Scraper{
		fleet: fleet, client: client, interval: interval, logger: logger, pods: map[*Load]*scrapeState{},
		staleAfter: staleAfter,
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "metrics_scrapes_total",
			Help: "Scrapes of the pods' vLLM /metrics, by result (ok, failed).",
		}, []string{"result"}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "metrics_failing_pods",
			Help: "Pods whose last metrics scrape failed: routing uses their last figures while they back off.",
		}),
		blind: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "metrics_blind_pods",
			Help: "Ready pods whose metrics never answered, or have failed for longer than routing.stale_metrics_after: routing avoids them while a pod it can see serves their model.",
		}),
	}
	s.ok, s.fail = s.scrapes.WithLabelValues("ok"), s.scrapes.WithLabelValues("failed")
	if reg != nil {
		for _, c := range []prometheus.Collector{s.scrapes, s.failing, s.blind} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("fleet: scraper metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run scrapes until ctx is done and returns once every scrape it started
// has returned. A pod whose scrape fails keeps its last figures; failures
// are logged at Debug (vLLM restarts are routine). From its start the
// fleet's pods can be blind (Load.Metrics).
func (s *Scraper) Run(ctx context.Context) error {
	s.fleet.scraped.Store(true)
	defer s.wg.Wait()
	t := time.NewTicker(max(s.interval/scrapePhases, time.Microsecond))
	defer t.Stop()
	for phase := 0; ; phase = (phase + 1) % scrapePhases {
		s.scrapePhase(ctx, phase, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// scrapePhase starts the scrapes of the ready pods in slot phase that are
// neither running nor backing off. Phase 0 forgets pods that left.
func (s *Scraper) scrapePhase(ctx context.Context, phase int, now time.Time) {
	snap := s.fleet.Snapshot()
	if phase == 0 {
		s.prune()
	}
	// The ranks of one server share its /metrics: its rank 0 scrapes it
	// for all of them.
	var servers map[string][]*Member
	for _, m := range snap.Members() {
		if m.Pod.DPRanks > 0 {
			if servers == nil {
				servers = map[string][]*Member{}
			}
			servers[m.Endpoint] = append(servers[m.Endpoint], m)
		}
	}
	for _, m := range snap.Members() {
		st := s.state(m.Load)
		ranks := servers[m.Endpoint]
		switch {
		case len(ranks) == 0:
		case m.Pod.DPRank == 0: // scrapes for every rank of its server
		case slices.ContainsFunc(ranks, func(r *Member) bool { return r.Pod.DPRank == 0 }):
			continue // its server's rank 0 scrapes for it
		default: // no rank 0 in the fleet: each rank for itself
			ranks = []*Member{m}
		}
		if !m.Pod.Ready || st.phase != phase || st.retryAt.Load() > now.UnixNano() || !st.busy.CompareAndSwap(false, true) {
			continue
		}
		states := make([]*scrapeState, len(ranks))
		for i, r := range ranks {
			states[i] = s.state(r.Load)
		}
		s.wg.Go(func() {
			defer st.busy.Store(false)
			err := s.scrape(ctx, m, st, ranks, states)
			end := time.Now()
			st.record(m.Load, err, s.interval, end)
			for i, r := range ranks {
				if r != m {
					states[i].record(r.Load, err, s.interval, end)
				}
			}
			if err == nil {
				s.ok.Inc()
				return
			}
			s.fail.Inc()
			// The first failure of a run is a WARN (at most one a minute a
			// pod); the pod is then priced on its last figures, and
			// metrics_failing_pods counts it.
			if st.failures.Load() == 1 && end.Sub(time.Unix(0, st.warned.Load())) >= time.Minute {
				st.warned.Store(end.UnixNano())
				s.logger.Warn("metrics scrapes of the pod failing; routing on its last figures", "pod", m.Pod.Name, "error", err)
			} else if s.logger.Enabled(ctx, slog.LevelDebug) {
				s.logger.Debug("metrics scrape failed", "pod", m.Pod.Name, "error", err, "failures", st.failures.Load())
			}
		})
	}
}

// prune forgets the pods not seen since the last pruning and counts the
// failing and the blind ones.
func (s *Scraper) prune() {
	failing := 0
	for l, st := range s.pods {
		if !st.seen {
			delete(s.pods, l)
			continue
		}
		st.seen = false
		if st.failures.Load() > 0 {
			failing++
		}
	}
	s.failing.Set(float64(failing))
	blind, now := 0, time.Now()
	for _, m := range s.fleet.Snapshot().Members() {
		if m.Pod.Ready && m.Load.Metrics(now, s.staleAfter).Blind() {
			blind++
		}
	}
	s.blind.Set(float64(blind))
}

// state is l's scraping state, marked seen; a new pod gets the next slot.
// Run's goroutine only.
func (s *Scraper) state(l *Load) *scrapeState {
	st := s.pods[l]
	if st == nil {
		st = &scrapeState{phase: s.next}
		s.next = (s.next + 1) % scrapePhases
		s.pods[l] = st
	}
	st.seen = true
	return st
}

// record ends l's scrape at now: success clears the backoff and stamps
// l.ScrapedAt; a failure doubles the backoff and, if it is the first of a
// run, stamps l.FailingSince.
func (st *scrapeState) record(l *Load, err error, interval time.Duration, now time.Time) {
	if err == nil {
		st.failures.Store(0)
		st.retryAt.Store(0)
		l.ScrapedAt.Store(now.UnixNano())
		l.FailingSince.Store(0)
		return
	}
	l.FailingSince.CompareAndSwap(0, now.UnixNano())
	f := min(st.failures.Add(1), 16)
	wait := min(interval<<(f-1), maxScrapeBackoff)
	st.retryAt.Store(now.Add(wait).UnixNano())
}

// scrape reads m's /metrics into its Load, and its prefill counters into
// st's estimator; with ranks (the candidates of one server's data-parallel
// ranks, m's among them, with their states), into each rank's Load and
// estimator its engine's figures.
func (s *Scraper) scrape(ctx context.Context, m *Member, st *scrapeState, ranks []*Member, states []*scrapeState) error {
	ctx, cancel := context.WithTimeout(ctx, s.interval*10)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Endpoint+metricsPath(cmp.Or(m.Pod.Engine, s.DefaultEngine)), nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fleet: GET %s/metrics: %s", m.Endpoint, resp.Status)
	}
	body := &io.LimitedReader{R: resp.Body, N: maxMetricsBytes + 1}
	all, engines, err := ParseVLLMEngines(body)
	if err != nil {
		// A body cut short (a reset, a proxy that gave up) parses as a
		// plausible page missing its last figures: none of it is kept.
		return fmt.Errorf("fleet: GET %s/metrics: %w", m.Endpoint, err)
	}
	if body.N == 0 {
		return fmt.Errorf("fleet: GET %s/metrics: larger than %d bytes", m.Endpoint, maxMetricsBytes)
	}
	now := time.Now()
	if len(ranks) == 0 {
		all.store(m.Load, &st.speed, now)
	}
	for i, r := range ranks {
		engines.Of(strconv.Itoa(r.Pod.DPRank)).store(r.Load, &states[i].speed, now)
	}
	return nil
}

// store keeps q's figures in l, a missing figure leaving l's as it was,
// and l's prefill speed as speed learns it from q's counters scraped at
// now.
func (q Queue) store(l *Load, speed *SpeedEstimator, now time.Time) {
	l.ObserveCache(now, q.Counters)
	if sp := speed.Observe(now, q.Counters); sp != nil {
		l.speed.Store(sp)
	}
	if q.Waiting >= 0 {
		l.Waiting.Store(q.Waiting)
	}
	if q.Running >= 0 {
		l.Running.Store(q.Running)
	}
	if q.KVUsage >= 0 {
		l.KVUsagePermille.Store(int64(q.KVUsage * 1000))
	}
	if q.KVTokens > 0 {
		l.KVCapacity.Store(q.KVTokens)
	}
}

// Queue is what a pod's metrics say of its load; -1 for a missing figure.
type Queue struct {
	Waiting, Running int64
	KVUsage          float64 // fraction of the KV cache in use
	// KVTokens is the tokens its KV cache holds (vllm:cache_config_info),
	// summed across engines.
	KVTokens int64
	// Counters are its prefill counters, summed across series.
	Counters Counters
}

// ParseVLLMMetrics reads vLLM's Prometheus text exposition, summing series
// across labels (one per model or engine). Names of older releases
// (vllm:gpu_cache_usage_perc) are accepted.
func ParseVLLMMetrics(r io.Reader) Queue {
	all, _, _ := ParseVLLMEngines(r)
	return all
}

// maxMetricsBytes bounds a /metrics page: vLLM's are tens of KiB.
const maxMetricsBytes = 8 << 20

// Engines are the figures of a server's engines (data-parallel ranks) by
// their engine label, and those of its series without one.
type Engines struct {
	byLabel   map[string]Queue
	unlabeled Queue
}

// Of returns the figures of the engine labeled engine: its own series
// with the unlabeled ones.
func (e Engines) Of(engine string) Queue {
	q, ok := e.byLabel[engine]
	if !ok {
		q = Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}
	}
	return q.merge(e.unlabeled)
}

// merge adds o's figures to q's: queues and caches' sizes summed, the
// fuller cache's use kept.
func (q Queue) merge(o Queue) Queue {
	if o.Waiting >= 0 {
		q.Waiting = max(q.Waiting, 0) + o.Waiting
	}
	if o.Running >= 0 {
		q.Running = max(q.Running, 0) + o.Running
	}
	q.KVUsage = max(q.KVUsage, o.KVUsage)
	if o.KVTokens >= 0 {
		q.KVTokens = max(q.KVTokens, 0) + o.KVTokens
	}
	q.Counters = q.Counters.add(o.Counters)
	return q
}

// ParseVLLMEngines reads vLLM's Prometheus text exposition in one pass:
// the figures of the whole server (as ParseVLLMMetrics) and of each
// engine. The error is r's (other than io.EOF), or a line over 1 MiB: the
// figures are then those of the part read.
func ParseVLLMEngines(r io.Reader) (all Queue, engines Engines, err error) {
	none := Queue{Waiting: -1, Running: -1, KVUsage: -1, KVTokens: -1}
	all, engines.unlabeled = none, none
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		rest := line[len(name):]
		if alias, ok := engineSeries[name]; ok {
			name = alias
		}
		counter := counterSeries[name]
		switch name {
		case "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", cacheConfig:
		default:
			if counter == 0 {
				continue
			}
		}
		engine, labeled, set := "", false, ""
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			set = rest[:i]
			engine, labeled = labelValue(set, "engine")
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
		one := none
		switch {
		case counter != 0:
			one.Counters.addSeries(counter, v)
		case name == "vllm:num_requests_waiting":
			one.Waiting = int64(v)
		case name == "vllm:num_requests_running":
			one.Running = int64(v)
		case name == cacheConfig:
			if one.KVTokens = cacheTokens(set); one.KVTokens < 0 {
				continue
			}
		default: // the fullest engine's cache
			one.KVUsage = v
		}
		all = all.merge(one)
		if !labeled {
			engines.unlabeled = engines.unlabeled.merge(one)
			continue
		}
		if engines.byLabel == nil {
			engines.byLabel = map[string]Queue{}
		}
		q, ok := engines.byLabel[engine]
		if !ok {
			q = none
		}
		engines.byLabel[engine] = q.merge(one)
	}
	return all, engines, sc.Err()
}

// cacheConfig is vLLM's info series of its KV cache's configuration.
const cacheConfig = "vllm:cache_config_info"

// engineSeries are the series of SGLang and TensorRT-LLM read as vLLM's,
// as the Gateway API Inference Extension's model server protocol pairs
// them: queued and running requests, the KV cache's use (a fraction), and
// SGLang's cache configuration (page_size and num_pages labels).
var engineSeries = map[string]string{
	"sglang:num_queue_reqs":       "vllm:num_requests_waiting",
	"sglang:num_running_reqs":     "vllm:num_requests_running",
	"sglang:token_usage":          "vllm:kv_cache_usage_perc",
	"sglang:cache_config_info":    cacheConfig,
	"trtllm_num_requests_waiting": "vllm:num_requests_waiting",
	"trtllm_num_requests_running": "vllm:num_requests_running",
	"trtllm_kv_cache_utilization": "vllm:kv_cache_usage_perc",
}

// metricsPath is where an engine serves its Prometheus metrics:
// trtllm-serve on /prometheus/metrics, the others on /metrics.
func metricsPath(engine string) string {
	if engine == "trtllm" {
		return "/prometheus/metrics"
	}
	return "/metrics"
}

// maxCacheTokens bounds a KV cache's size read from its labels: no GPU
// holds 2^40 tokens, and a sum over engines stays far from overflowing.
const maxCacheTokens = 1 << 40

// cacheTokens is the tokens a KV cache holds by the labels of its
// cacheConfig series: kv_cache_size_tokens where vLLM gives it (models
// mixing attention kinds hold fewer than their blocks' tokens), else
// num_gpu_blocks × block_size; -1 when neither is a positive integer (up
// to maxCacheTokens).
func cacheTokens(set string) int64 {
	if v, ok := labelValue(set, "kv_cache_size_tokens"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n <= maxCacheTokens {
			return n
		}
	}
	b, okB := labelValue(set, "num_gpu_blocks")
	s, okS := labelValue(set, "block_size")
	if !okB || !okS { // SGLang's names
		b, okB = labelValue(set, "num_pages")
		s, okS = labelValue(set, "page_size")
	}
	if !okB || !okS {
		return -1
	}
	blocks, errB := strconv.ParseInt(b, 10, 64)
	size, errS := strconv.ParseInt(s, 10, 64)
	if errB != nil || errS != nil || blocks <= 0 || size <= 0 || blocks > maxCacheTokens/size {
		return -1
	}
	return blocks * size
}

// labelValue returns the value of label name in a series' label set (the
// text from '{' to before '}'), unescaped, and whether it is there.
func labelValue(set, name string) (string, bool) {
	set = strings.TrimPrefix(set, "{")
	for set != "" {
		set = strings.TrimLeft(set, " ,")
		eq := strings.IndexByte(set, '=')
		if eq < 0 || eq+1 >= len(set) || set[eq+1] != '"' {
			return "", false
		}
		key := strings.TrimSpace(set[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(set) && set[i] != '"'; i++ {
			c := set[i]
			if c == '\\' && i+1 < len(set) {
				i++
				if c = set[i]; c == 'n' {
					c = '\n'
				}
			}
			val.WriteByte(c)
		}
		if i >= len(set) {
			return "", false // unterminated
		}
		if key == name {
			return val.String(), true
		}
		set = set[i+1:]
	}
	return "", false
}
