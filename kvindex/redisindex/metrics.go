package redisindex

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	up           prometheus.Gauge
	unbounded    prometheus.GaugeFunc
	queued       prometheus.GaugeFunc
	leases       prometheus.Gauge
	errors       *prometheus.CounterVec
	refused      *prometheus.CounterVec
	localMatches prometheus.Counter
	clears       prometheus.Counter
	taken        *prometheus.CounterVec
	continued    prometheus.Counter
	lapsed       prometheus.Counter
	fenced       prometheus.Counter
	roundTrip    *prometheus.HistogramVec
	compactions  *prometheus.CounterVec
	// The round trips of every match, event batch, load read and homes'
	// sync, looked up once rather than by label on each.
	rtMatch, rtEvents, rtLoad, rtHomes prometheus.Observer
	// homeEntries counts the home streams' entries by kind and direction;
	// homesWritten, tailsWritten, homesRead and tailsRead are its series.
	homeEntries                                      *prometheus.CounterVec
	homesWritten, tailsWritten, homesRead, tailsRead prometheus.Counter
	// homesBehind counts the syncs that read a stream's most entries.
	homesBehind prometheus.Counter
}

func newMetrics(x *Index, reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "kvrouter", "index_redis"
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "up",
			Help: "1 while Redis answers; 0 while matches read the local view.",
		}),
		unbounded: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "unbounded",
			Help: "1 while block keys have no TTL (index.redis.ttl: 0) and Redis's maxmemory and allkeys-* policy were not found to bound them.",
		}, func() float64 {
			if x.Unbounded() {
				return 1
			}
			return 0
		}),
		queued: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "events_queued",
			Help: fmt.Sprintf("Event batches (and flushes) waiting for the group writer; at %d a pod's events wait for room.", eventQueue),
		}, func() float64 { return float64(len(x.appends)) }),
		leases: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "leases",
			Help: "Pods whose events this replica writes to Redis (writer leases held).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Failed round trips to Redis, by operation (match, events, clear, speculate, settle, lease, load, homes, ping).",
		}, []string{"op"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "refused_total",
			Help: "Values in Redis refused as no holder, by reason: type (a key of the wrong type), size (not whole records), record, holders (over the holder bound), pods (a pod table entry), load (a load table field or value: taken as no load), homes (a home table field or value: ignored).",
		}, []string{"reason"}),
		localMatches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "local_matches_total",
			Help: "Matches answered from the local view because Redis was down.",
		}),
		clears: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "clears_total",
			Help: "Pods cleared in Redis by this replica (a new epoch its older records do not count under): clear events, restarts, and leases taken afresh.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "leases_fenced_total",
			Help: "Clears refused because another replica had taken the pod's lease meanwhile (a new epoch): this replica stopped writing the pod's events.",
		}),
		taken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "leases_taken_total",
			Help: "Writer leases this replica took, by how: continued (the previous holders' records kept, what they lacked by this replica's view appended) or fresh (a pod never numbered, or one this replica saw cleared: its view copied in).",
		}, []string{"how"}),
		continued: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "lease_corrections_total",
			Help: "Records a continuing take appended: a block's count in a tier that differed between Redis and this replica's view (events the previous holder had not written).",
		}),
		lapsed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "leases_lapsed_total",
			Help: "Times this replica stopped writing a pod's events because its lease was not renewed in time (a pause, or a slow Redis); the next lease tick takes it again if it can.",
		}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "round_trip_seconds",
			Help:    "Time of a Redis round trip, by operation (match, events, load, homes: a write and read of the shared homes, every 250 ms and each lease tick); for events, from the batch's arrival to its records in Redis, its wait in the queue included.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}, []string{"op"}),
	}
	m.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "compactions_total",
		Help: "Block keys grown by appends past each 64 records, or read by a match with 16 or more GPU store records outside a summary, 128 records or more, or past the holder bound, and rewritten to one record per live holder (a summary of the plainest), by result: done, raced (the key changed other than by appends: recreated, or compacted by another replica), dropped (queue full).",
	}, []string{"result"})
	m.rtMatch, m.rtEvents, m.rtLoad = m.roundTrip.WithLabelValues("match"), m.roundTrip.WithLabelValues("events"), m.roundTrip.WithLabelValues("load")
	m.rtHomes = m.roundTrip.WithLabelValues("homes")
	m.homeEntries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "home_entries_total",
		Help: "Entries of the shared homes' streams, by kind (home: a prefix's home pod; tail: a prompt that grew a prefix's footprint) and direction (written by this replica; read: the other replicas' read from the streams, of which the latest home of each prefix on a pod of this replica's fleet, unexpired, and every tail are handed to its router).",
	}, []string{"kind", "direction"})
	m.homesWritten, m.tailsWritten = m.homeEntries.WithLabelValues("home", "written"), m.homeEntries.WithLabelValues("tail", "written")
	m.homesRead, m.tailsRead = m.homeEntries.WithLabelValues("home", "read"), m.homeEntries.WithLabelValues("tail", "read")
	m.homesBehind = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "home_syncs_behind_total",
		Help: fmt.Sprintf("Syncs of the shared homes that read a stream's most entries at once (%d): this replica fell behind the other replicas' writes, and reads on at the next syncs.", homeStreamRead),
	})
	m.up.Set(1)
	if reg == nil {
		return m, nil
	}
	for _, how := range []string{"continued", "fresh"} {
		m.taken.WithLabelValues(how)
	}
	for _, c := range []prometheus.Collector{m.up, m.unbounded, m.queued, m.leases, m.errors, m.refused, m.localMatches, m.clears, m.taken, m.continued, m.lapsed, m.fenced, m.roundTrip, m.compactions, m.homeEntries, m.homesBehind} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("redisindex: %w", err)
		}
	}
	return m, nil
}
