package router

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	decisions *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	duration  prometheus.Histogram
	matched   prometheus.Counter
	total     prometheus.Counter
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
		matched: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "cached_blocks_total",
			Help: "Prompt blocks cached on the chosen pods.",
		}),
		total: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "router", Name: "prompt_blocks_total",
			Help: "Full prompt blocks of routed requests.",
		}),
	}
	if err := register(reg, m.decisions, m.refusals, m.duration, m.matched, m.total); err != nil {
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
	m.duration.Observe(d.Elapsed.Seconds())
	m.matched.Add(float64(d.Matched))
	m.total.Add(float64(d.Total))
}

func (m *metrics) refused(err error) {
	status := "internal"
	if e := AsError(err); e != nil {
		status = strconv.Itoa(e.Status)
	}
	m.refusals.WithLabelValues(status).Inc()
}
