package extproc

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	refusals     *prometheus.CounterVec
	streamErrors prometheus.Counter
	// streamsRefused counts streams refused over Config.MaxStreams.
	streamsRefused prometheus.Counter
	// subsetIgnored counts subset hint entries that name no endpoint.
	subsetIgnored prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "extproc", Name: "immediate_responses_total",
			Help: "Requests answered by kvrouter itself instead of a pod, by HTTP status.",
		}, []string{"status"}),
		streamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "extproc", Name: "stream_errors_total",
			Help: "ext_proc streams ended with a gRPC error (Envoy answers them with its status_on_error).",
		}),
		subsetIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "extproc", Name: "subset_entries_ignored_total",
			Help: "Endpoint subset hint entries that are neither ip:port nor an IP (or not strings), ignored.",
		}),
		streamsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "extproc", Name: "streams_refused_total",
			Help: "ext_proc streams refused because extproc.max_streams were open (Envoy answers them with its status_on_error).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.refusals, m.streamErrors, m.streamsRefused, m.subsetIgnored} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) refused(status int) {
	m.refusals.WithLabelValues(strconv.Itoa(status)).Inc()
}
