package router

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	decisions *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	duration  prometheus.Histogram
	stages    [5]prometheus.Observer // parse, tokenize, hash, match, score
	matched   *prometheus.CounterVec // by model
	total     *prometheus.CounterVec // by model
	moved     prometheus.Counter
	shed      *prometheus.CounterVec
	// unknownObjectives counts requests naming an objective not known.
	unknownObjectives prometheus.Counter
	multimodal        prometheus.Counter
	apis              *prometheus.CounterVec
	// The router's queue (queue.go).
	queued     prometheus.Gauge
	queueExits *prometheus.CounterVec
	queueWait  prometheus.Histogram
	// Waits for capacity (capacity.go), and the requests waiting by model
	// (there and in the queue).
	capacityWaits *prometheus.CounterVec
	waiting       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "decisions_total",
			Help: "Routing decisions by reason.",
		}, []string{"reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "refusals_total",
			Help: "Requests refused, by HTTP status.",
		}, []string{"status"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "decision_duration_seconds",
			Help:    "Time to parse, tokenize, hash, match and score one request.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}),
		matched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "cached_blocks_total",
			Help: "Prompt blocks cached on the chosen pods, by model.",
		}, []string{"model"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "prompt_blocks_total",
			Help: "Full prompt blocks of routed requests, by model.",
		}, []string{"model"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "shed_total",
			Help: "Requests shed with 429 (objective priority below zero, every candidate pod saturated), by objective.",
		}, []string{"objective"}),
		unknownObjectives: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "unknown_objectives_total",
			Help: "Requests naming an InferenceObjective kvrouter does not know: routed at priority 0.",
		}),
		moved: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "decisions_moved_total",
			Help: "Decisions moved to a fallback endpoint the proxy reports served the request.",
		}),
		apis: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "api_decisions_total",
			Help: "Routing decisions by the API of the request path: completion, chat, messages (Anthropic), responses (OpenAI), other.",
		}, []string{"api"}),
		multimodal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "multimodal_requests_total",
			Help: "Chat requests with media content parts: matched on the full blocks before their first media item only.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "queued_requests",
			Help: "Requests waiting in kvrouter's queue for a pod with room (routing.queue_prefills_per_pod).",
		}),
		queueExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "queue_exits_total",
			Help: "Requests that waited in kvrouter's queue, by how the wait ended: released (a pod had room, or the queue closed), expired (routing.queue_max_wait), canceled (the client went away), drained (routed at once as kvrouter began to stop).",
		}, []string{"result"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "queue_wait_seconds",
			Help:    "Time requests routed out of kvrouter's queue waited in it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
	m.capacityWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "capacity_waits_total",
		Help: "Requests for a model with no ready pod that waited for one (routing.scale_from_zero_wait), by how the wait ended: routed (a pod became ready), timeout (refused as before, 503 or 404), canceled (the client went away).",
	}, []string{"result"})
	m.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "waiting_requests",
		Help: "Requests waiting for capacity, by model: for a ready pod (routing.scale_from_zero_wait) and in kvrouter's queue. The signal to scale a model's pods on.",
	}, []string{"model"})
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "kvrouter", Subsystem: "router", Name: "stage_duration_seconds",
		Help:    "Time of each stage of a decision: parse (the body, the candidates), tokenize (rendering chats too), hash, match (the index), score.",
		Buckets: prometheus.ExponentialBuckets(5e-6, 2, 16),
	}, []string{"stage"})
	for i, stage := range []string{"parse", "tokenize", "hash", "match", "score"} {
		m.stages[i] = stages.WithLabelValues(stage)
	}
	// Every series the dashboard and the alerts read exists from the
	// start, at zero until something happens.
	for _, r := range Reasons {
		m.decisions.WithLabelValues(string(r))
	}
	for _, status := range []string{"400", "404", "413", "429", "503", "internal"} {
		m.refusals.WithLabelValues(status)
	}
	for _, result := range []string{"released", "expired", "canceled", "drained"} {
		m.queueExits.WithLabelValues(result)
	}
	for _, result := range []string{"routed", "timeout", "canceled"} {
		m.capacityWaits.WithLabelValues(result)
	}
	if err := register(reg, stages, m.decisions, m.refusals, m.duration, m.matched, m.total, m.moved, m.shed, m.unknownObjectives, m.multimodal, m.apis, m.queued, m.queueExits, m.queueWait, m.capacityWaits, m.waiting); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers cs on reg; a nil reg registers nothing.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) decided(d *Decision) {
	m.decisions.WithLabelValues(string(d.Reason)).Inc()
	m.apis.WithLabelValues(d.API.String()).Inc()
	m.duration.Observe(d.Elapsed.Seconds())
	for i, t := range [...]time.Duration{d.Stages.Parse, d.Stages.Tokenize, d.Stages.Hash, d.Stages.Match, d.Stages.Score} {
		m.stages[i].Observe(t.Seconds())
	}
	if d.Model != "" {
		m.matched.WithLabelValues(d.Model).Add(float64(d.Matched))
		m.total.WithLabelValues(d.Model).Add(float64(d.Total))
		m.waiting.WithLabelValues(d.Model) // the model's scaling signal exists, at zero, from its first request
	}
}

func (m *metrics) refused(err error) {
	status := "internal"
	if e := AsError(err); e != nil {
		status = strconv.Itoa(e.Status)
	}
	m.refusals.WithLabelValues(status).Inc()
}

// prefixCollector reports the tokenizers' prefix caches (see
// tokenizer.PrefixCache), summed over the loaded models.
type prefixCollector struct{ tok prefixTokenizers }

var prefixDescs = struct {
	lookups, hits, reused, resyncFails, evictions, bytes, budget, entries *prometheus.Desc
}{
	lookups: prometheus.NewDesc("kvrouter_tokenizer_prefix_lookups_total",
		"Prompts encoded through the tokenizers' prefix caches.", nil, nil),
	hits: prometheus.NewDesc("kvrouter_tokenizer_prefix_hits_total",
		"Prompts that reused the token ids of a cached prompt's prefix.", nil, nil),
	reused: prometheus.NewDesc("kvrouter_tokenizer_prefix_reused_tokens_total",
		"Token ids taken from the prefix caches instead of tokenized.", nil, nil),
	resyncFails: prometheus.NewDesc("kvrouter_tokenizer_prefix_resync_failures_total",
		"Reuses refused by the resynchronization check and tokenized whole instead (expected 0).", nil, nil),
	evictions: prometheus.NewDesc("kvrouter_tokenizer_prefix_evictions_total",
		"Cached prompts dropped to stay within the memory budget.", nil, nil),
	bytes: prometheus.NewDesc("kvrouter_tokenizer_prefix_cache_bytes",
		"Bytes the prefix caches hold: texts, token ids, block hashes.", nil, nil),
	budget: prometheus.NewDesc("kvrouter_tokenizer_prefix_cache_budget_bytes",
		"The prefix caches' memory budget, summed over the loaded models.", nil, nil),
	entries: prometheus.NewDesc("kvrouter_tokenizer_prefix_cache_entries",
		"Prompts the prefix caches hold.", nil, nil),
}

func (prefixCollector) Describe(ch chan<- *prometheus.Desc) {
	d := prefixDescs
	for _, x := range []*prometheus.Desc{d.lookups, d.hits, d.reused, d.resyncFails, d.evictions, d.bytes, d.budget, d.entries} {
		ch <- x
	}
}

func (c prefixCollector) Collect(ch chan<- prometheus.Metric) {
	s, _ := c.tok.prefixStats()
	d := prefixDescs
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	gauge := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v))
	}
	counter(d.lookups, s.Lookups)
	counter(d.hits, s.Hits)
	counter(d.reused, s.TokensReused)
	counter(d.resyncFails, s.ResyncFailures)
	counter(d.evictions, s.Evictions)
	gauge(d.bytes, s.Bytes)
	gauge(d.budget, s.Budget)
	gauge(d.entries, int64(s.Entries))
}

// podCollector reports, per pod, the load kvrouter routes on: the figures
// of its last metrics scrape, what kvrouter routed there and has not seen
// finish, and the prefill speed it is priced at.
type podCollector struct{ r *Router }

var (
	speedDesc = prometheus.NewDesc("kvrouter_router_pod_prefill_tokens_per_second",
		"The prefill speed each pod is priced at, in tokens per second at no context: learned from its vLLM metrics, or routing.prefill_tokens_per_second.", []string{"pod"}, nil)
	speedEvidenceDesc = prometheus.NewDesc("kvrouter_router_pod_prefill_learned_seconds",
		"The seconds of each pod's prefill its learned speed rests on (faded with age; the configured speed counts as 0.5).", []string{"pod"}, nil)
	podWaitingDesc = prometheus.NewDesc("kvrouter_router_pod_waiting_requests",
		"Requests waiting in each pod's own queue (vllm:num_requests_waiting), as last scraped.", []string{"pod"}, nil)
	podRunningDesc = prometheus.NewDesc("kvrouter_router_pod_running_requests",
		"Requests each pod runs (vllm:num_requests_running), as last scraped.", []string{"pod"}, nil)
	podKVUsageDesc = prometheus.NewDesc("kvrouter_router_pod_kv_usage_ratio",
		"The share of each pod's KV cache in use (vllm:kv_cache_usage_perc), as last scraped.", []string{"pod"}, nil)
	podInFlightDesc = prometheus.NewDesc("kvrouter_router_pod_inflight_requests",
		"Requests kvrouter routed to each pod that have not finished.", []string{"pod"}, nil)
	podPrefillDesc = prometheus.NewDesc("kvrouter_router_pod_prefill_tokens",
		"Prefill kvrouter routed to each pod and has not seen done: uncached prompt tokens, weighed by their context.", []string{"pod"}, nil)
)

func (podCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{speedDesc, speedEvidenceDesc, podWaitingDesc, podRunningDesc, podKVUsageDesc, podInFlightDesc, podPrefillDesc} {
		ch <- d
	}
}

func (c podCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.r.fleet.Snapshot().Members() {
		name, l := m.Pod.Name, m.Load
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		gauge(speedDesc, 1/c.r.PrefillSecondsPerToken(l))
		gauge(speedEvidenceDesc, c.r.LearnedSeconds(l))
		gauge(podWaitingDesc, float64(l.Waiting.Load()))
		gauge(podRunningDesc, float64(l.Running.Load()))
		gauge(podKVUsageDesc, float64(l.KVUsagePermille.Load())/1000)
		gauge(podInFlightDesc, float64(l.InFlight.Load()))
		gauge(podPrefillDesc, float64(l.PrefillTokens.Load()))
	}
}
