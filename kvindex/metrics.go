package kvindex

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the index's Prometheus collectors.
type metrics struct {
	stored, removed, evicted, cleared, removedAbsent, confirmed, specAdded, overflow prometheus.Counter
	specRenewed, specSettled                                                         prometheus.Counter
	blocksRequested, blocksMatched                                                   prometheus.Counter
	matchSeconds                                                                     prometheus.Histogram
}

func newMetrics(x *Index, reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "kvrouter", Subsystem: "kvindex", Name: name, Help: help})
	}
	m := &metrics{
		stored:          counter("stored_total", "Block hashes stored by pods (BlockStored events), repeats included."),
		removed:         counter("removed_total", "Block hashes removed by pods (BlockRemoved events)."),
		removedAbsent:   counter("removed_absent_total", "BlockRemoved hashes the index did not hold for that pod and tier (ignored)."),
		evicted:         counter("evicted_total", "Entries evicted, least recently stored first, because the index reached its entry bound."),
		cleared:         counter("cleared_total", "Entries dropped by pod or tier clears and removals to zero count."),
		confirmed:       counter("speculative_confirmed_total", "Speculative entries confirmed by the pod's own BlockStored event."),
		overflow:        counter("overflow_total", "Stores and speculative entries ignored because the block already has the most holders (4096)."),
		specAdded:       counter("speculative_added_total", "Speculative entries recorded after routing decisions."),
		specRenewed:     counter("speculative_renewed_total", "Speculative entries given a new pending deadline by a later decision for the same pod."),
		specSettled:     counter("speculative_settled_total", "Speculative entries shortened to the grace period because their request was prefilled or ended."),
		blocksRequested: counter("match_blocks_requested_total", "Blocks looked up by matches."),
		blocksMatched:   counter("match_blocks_matched_total", "Blocks of the best candidate's leading match, summed over matches."),
		matchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "kvrouter", Subsystem: "kvindex", Name: "match_duration_seconds",
			Help:    "Time to match one request's blocks against the candidate pods.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 16),
		}),
	}
	if reg == nil {
		return m, nil
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kvrouter", Subsystem: "kvindex", Name: name, Help: help}, f)
	}
	for _, c := range []prometheus.Collector{
		m.stored, m.removed, m.removedAbsent, m.evicted, m.cleared, m.confirmed, m.specAdded, m.overflow,
		m.specRenewed, m.specSettled,
		m.blocksRequested, m.blocksMatched, m.matchSeconds,
		gauge("entries", "Real (block, pod, tier) entries in the index.", func() float64 { r, _ := x.Len(); return float64(r) }),
		gauge("speculative_entries", "Speculative entries not yet freed.", func() float64 { _, s := x.Len(); return float64(s) }),
		gauge("pods", "Pods registered in the index.", func() float64 { return float64(x.livePods()) }),
		gauge("max_entries", "The configured entry bound.", func() float64 { return float64(x.cfg.MaxEntries) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) record(n *opCounts, stored, removed int) {
	if stored > 0 {
		m.stored.Add(float64(stored))
	}
	if removed > 0 {
		m.removed.Add(float64(removed))
	}
	if n.evicted > 0 {
		m.evicted.Add(float64(n.evicted))
	}
	if n.absent > 0 {
		m.removedAbsent.Add(float64(n.absent))
	}
	if n.cleared > 0 {
		m.cleared.Add(float64(n.cleared))
	}
	if n.confirmed > 0 {
		m.confirmed.Add(float64(n.confirmed))
	}
	if n.overflow > 0 {
		m.overflow.Add(float64(n.overflow))
	}
}

func (m *metrics) speculated(n *opCounts) {
	m.specAdded.Add(float64(n.added))
	if n.renewed > 0 {
		m.specRenewed.Add(float64(n.renewed))
	}
	if n.evicted > 0 {
		m.evicted.Add(float64(n.evicted))
	}
	if n.overflow > 0 {
		m.overflow.Add(float64(n.overflow))
	}
}

func (m *metrics) settledSpec(n *opCounts) {
	if n.settled > 0 {
		m.specSettled.Add(float64(n.settled))
	}
}

func (m *metrics) matched(requested, best int, d time.Duration) {
	m.blocksRequested.Add(float64(requested))
	m.blocksMatched.Add(float64(best))
	m.matchSeconds.Observe(d.Seconds())
}

func (x *Index) livePods() int {
	x.pods.RLock()
	defer x.pods.RUnlock()
	return len(x.pods.byName)
}
