package kvevents

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kvrouter_kvevents_* collectors. Per-pod series are deleted
// when the pod is removed, so label cardinality follows the live fleet.
type metrics struct {
	batches, decodeErrors, gaps, restarts, queueDrops *prometheus.CounterVec
	oversize, reconnects, tokenMismatch, ignored      *prometheus.CounterVec
	events, replays, clears, hashChecks               *prometheus.CounterVec
	rekeyFailed, rekeyEvicted, groupSkipped           *prometheus.CounterVec
	sources                                           *prometheus.CounterVec
	connected, lastSeq, verification, rekeyed         *prometheus.GaugeVec
	applySeconds                                      prometheus.Histogram
	perPod                                            []*prometheus.MetricVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "kvevents", Name: name, Help: help,
		}, append([]string{"pod"}, labels...))
		m.perPod = append(m.perPod, v.MetricVec)
		return v
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "kvevents", Name: name, Help: help,
		}, append([]string{"pod"}, labels...))
		m.perPod = append(m.perPod, v.MetricVec)
		return v
	}
	m.batches = counter("batches_total", "Event batches applied.")
	m.events = counter("events_total", "Events applied, by type.", "type")
	m.decodeErrors = counter("decode_errors_total", "Batches that could not be decoded or framed.")
	m.gaps = counter("gaps_total", "Sequence gaps detected.")
	m.replays = counter("replays_total", "Replay requests, by result (ok, failed, exhausted, retried).", "result")
	m.restarts = counter("restarts_total", "Publisher restarts detected (sequence went backwards).")
	m.clears = counter("clears_total", "Times the pod's entries were cleared, by reason.", "reason")
	m.queueDrops = counter("queue_drops_total", "Live batches dropped because the queue to the index was full.")
	m.oversize = counter("oversize_total", "Batches dropped for exceeding the maximum message size.")
	m.reconnects = counter("reconnects_total", "Connections lost or refused, each followed by a backoff.")
	m.tokenMismatch = counter("token_mismatch_total", "BlockStored events whose token_ids length is not block_size times the number of hashes.")
	m.ignored = counter("ignored_events_total", "Events of unknown types.")
	m.groupSkipped = counter("group_skipped_events_total", "BlockStored and BlockRemoved events of KV-cache groups the index does not hold, by the group's kind (a refused group's, cross_attention, ...; other: a kind kvrouter does not know; unseen: a removal in a group no BlockStored has named yet).", "kind")
	m.sources = counter("event_sources_total", "Times a rank's event endpoints were looked up, by result: discovered (the pod's /kv_event_sources answer), absent (the pod serves no such route: configured or default ports), failed (no answer: configured or default ports), refused (an answer kvrouter cannot use: nothing followed), ports (not asked).", "result")
	m.hashChecks = counter("hash_checks_total", "Hash chain checks of BlockStored events, by result (ok, mismatch).", "result")
	m.rekeyFailed = counter("rekey_failed_blocks_total", "Blocks of a rekeyed pod not stored under kvrouter's hash, or whose removal did not resolve, by reason (no_tokens, block_size, extra_keys, parent_missing, removal_unknown).", "reason")
	m.rekeyEvicted = counter("rekey_evicted_total", "Blocks of a rekeyed pod that fell out of its bounded map from the pod's hashes to kvrouter's.")
	m.rekeyed = gauge("rekeyed", "1 while the pod's index entries are kvrouter's own hashes of its events' token ids (its own failed verification).")
	m.connected = gauge("connected", "1 while the subscriber is connected to the pod's rank.", "rank")
	m.lastSeq = gauge("last_seq", "Sequence number of the last batch of the pod's rank applied to the index.", "rank")
	m.verification = gauge("hash_verification", "The pod's hash verification state: 0 unknown, 1 verified, 2 mismatch.")
	m.applySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kvrouter", Subsystem: "kvevents", Name: "apply_seconds",
		Help:    "Time to decode and apply one batch.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10),
	})
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{
		m.batches, m.events, m.decodeErrors, m.gaps, m.replays, m.restarts, m.clears, m.queueDrops,
		m.oversize, m.reconnects, m.tokenMismatch, m.ignored, m.hashChecks, m.connected, m.lastSeq,
		m.verification, m.rekeyFailed, m.rekeyEvicted, m.rekeyed, m.applySeconds, m.groupSkipped,
		m.sources,
	} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kvevents: register metrics: %w", err)
	}
	return m, nil
}

// forgetPod deletes every series of pod.
func (m *metrics) forgetPod(pod string) {
	for _, v := range m.perPod {
		v.DeletePartialMatch(prometheus.Labels{"pod": pod})
	}
}

// podMetrics are one pod's series, resolved once so the hot path does no
// label lookups.
type podMetrics struct {
	batches, decodeErrors, gaps, restarts, queueDrops prometheus.Counter
	oversize, reconnects, tokenMismatch, ignored      prometheus.Counter
	events                                            [wire.NumEventTypes]prometheus.Counter
	replayOK, replayFailed, replayExhausted           prometheus.Counter
	replayRetried                                     prometheus.Counter
	clearRestart, clearExhausted, clearEvent          prometheus.Counter
	checkOK, checkMismatch                            prometheus.Counter
	rekeyFailed                                       [numRekeyReasons]prometheus.Counter
	groupSkipped                                      [len(skipLabels)]prometheus.Counter
	sources                                           [numSourceResults]prometheus.Counter
	rekeyEvicted                                      prometheus.Counter
	verification, rekeyed                             prometheus.Gauge
	applySeconds                                      prometheus.Histogram
	m                                                 *metrics
	pod                                               string
}

func (m *metrics) forPod(pod string) *podMetrics {
	p := &podMetrics{m: m, pod: pod, applySeconds: m.applySeconds}
	p.batches = m.batches.WithLabelValues(pod)
	p.decodeErrors = m.decodeErrors.WithLabelValues(pod)
	p.gaps = m.gaps.WithLabelValues(pod)
	p.restarts = m.restarts.WithLabelValues(pod)
	p.queueDrops = m.queueDrops.WithLabelValues(pod)
	p.oversize = m.oversize.WithLabelValues(pod)
	p.reconnects = m.reconnects.WithLabelValues(pod)
	p.tokenMismatch = m.tokenMismatch.WithLabelValues(pod)
	p.ignored = m.ignored.WithLabelValues(pod)
	for t := range p.events {
		p.events[t] = m.events.WithLabelValues(pod, wire.EventType(t).String())
	}
	p.replayOK = m.replays.WithLabelValues(pod, "ok")
	p.replayFailed = m.replays.WithLabelValues(pod, "failed")
	p.replayExhausted = m.replays.WithLabelValues(pod, "exhausted")
	p.replayRetried = m.replays.WithLabelValues(pod, "retried")
	p.clearRestart = m.clears.WithLabelValues(pod, "restart")
	p.clearExhausted = m.clears.WithLabelValues(pod, "exhausted")
	p.clearEvent = m.clears.WithLabelValues(pod, "all_blocks_cleared")
	p.checkOK = m.hashChecks.WithLabelValues(pod, "ok")
	p.checkMismatch = m.hashChecks.WithLabelValues(pod, "mismatch")
	p.verification = m.verification.WithLabelValues(pod)
	for r := range p.rekeyFailed {
		p.rekeyFailed[r] = m.rekeyFailed.WithLabelValues(pod, rekeyReasonNames[r])
	}
	p.rekeyEvicted = m.rekeyEvicted.WithLabelValues(pod)
	for k := range p.groupSkipped {
		p.groupSkipped[k] = m.groupSkipped.WithLabelValues(pod, skipLabels[k])
	}
	for r := range p.sources {
		p.sources[r] = m.sources.WithLabelValues(pod, sourceResults[r])
	}
	p.rekeyed = m.rekeyed.WithLabelValues(pod)
	return p
}

// rank returns the state of one DP rank.
func (p *podMetrics) rank(r int) *rankState {
	rs := strconv.Itoa(r)
	st := &rankState{rank: r, connected: p.m.connected.WithLabelValues(p.pod, rs), lastSeq: p.m.lastSeq.WithLabelValues(p.pod, rs)}
	st.seq.Store(-1)
	return st
}

// rankState is one DP rank's connection state and last applied sequence
// number, kept for Status and mirrored in the rank's gauges.
type rankState struct {
	rank               int
	connected, lastSeq prometheus.Gauge
	up                 atomic.Bool
	seq                atomic.Int64 // -1 until a batch was applied
	source             atomic.Pointer[Source]
}

func (r *rankState) setConnected(up bool) {
	r.up.Store(up)
	if up {
		r.connected.Set(1)
	} else {
		r.connected.Set(0)
	}
}

func (r *rankState) applied(seq uint64) {
	r.seq.Store(int64(seq))
	r.lastSeq.Set(float64(seq))
}
