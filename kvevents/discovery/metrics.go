package discovery

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kvrouter_discovery_* collectors of Discovery.
type metrics struct {
	pods    *prometheus.GaugeVec // by state: ready, not_ready
	synced  prometheus.Gauge
	ignored prometheus.Counter
	pool    prometheus.Gauge
}

// newMetrics registers pool_found only when a pool is served (pooled), so
// that an alert on it needs nothing else to tell the modes apart.
func newMetrics(reg prometheus.Registerer, pooled bool) (*metrics, error) {
	m := &metrics{
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "discovery", Name: "pods",
			Help: "Discovered vLLM pods with an IP, by state (ready, not_ready).",
		}, []string{"state"}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "discovery", Name: "synced",
			Help: "1 once every pod informer has listed its pods.",
		}),
		ignored: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "discovery", Name: "ignored_annotations_total",
			Help: "kvrouter.io/* pod annotations ignored as invalid, or pods skipped for lack of a model.",
		}),
		pool: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "discovery", Name: "pool_found",
			Help: "With --pool-name only: 1 while the InferencePool exists, 0 while it is missing or unreadable (no pod is served).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, state := range []string{"ready", "not_ready"} {
		m.pods.WithLabelValues(state) // at zero until the first pod
	}
	cs := []prometheus.Collector{m.pods, m.synced, m.ignored}
	if pooled {
		cs = append(cs, m.pool)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("discovery: register metrics: %w", err)
		}
	}
	return m, nil
}

// countLocked sets the pod gauges from what the consumer was told.
func (d *Discovery) countLocked() {
	ready := 0
	for _, p := range d.mu.known {
		if p.Ready {
			ready++
		}
	}
	d.metrics.pods.WithLabelValues("ready").Set(float64(ready))
	d.metrics.pods.WithLabelValues("not_ready").Set(float64(len(d.mu.known) - ready))
}

// staticMetrics are the kvrouter_podsfile_* collectors of Static.
type staticMetrics struct {
	reloads *prometheus.CounterVec // by result: ok, error
	pods    prometheus.Gauge
}

func newStaticMetrics(reg prometheus.Registerer) (*staticMetrics, error) {
	m := &staticMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "podsfile", Name: "reloads_total",
			Help: "Reads of the pods file that found a change, by result: ok (applied) or error (the last good pods kept).",
		}, []string{"result"}),
		pods: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "podsfile", Name: "pods",
			Help: "Pods known without Kubernetes: static ones and those of the pods file.",
		}),
	}
	for _, result := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(result) // at zero from the start
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reloads, m.pods} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("discovery: register pods file metrics: %w", err)
		}
	}
	return m, nil
}
