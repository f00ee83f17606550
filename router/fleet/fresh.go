package fleet

import "time"

// DefaultStaleAfter is how long a pod's scrapes may fail before its last
// figures are too old to route by (router.Config.StaleMetricsAfter).
const DefaultStaleAfter = 10 * time.Second

// Metrics is how fresh a pod's scraped figures are.
type Metrics uint8

// The states of a pod's figures. MetricsNever and MetricsStale are blind:
// the router cannot see the pod's queue, and its zero or old figures would
// make it look idler than it may be.
const (
	MetricsPending Metrics = iota // no scrape has ended yet
	MetricsOK                     // the last scrape succeeded, or failures began within the bound
	MetricsNever                  // scrapes failed and none ever succeeded
	MetricsStale                  // scrapes have failed for longer than the bound
)

// String is the state as /debug/pods reports it.
func (m Metrics) String() string {
	switch m {
	case MetricsOK:
		return "ok"
	case MetricsNever:
		return "never"
	case MetricsStale:
		return "stale"
	default:
		return "pending"
	}
}

// Blind reports whether figures in state m must not be routed by.
func (m Metrics) Blind() bool { return m == MetricsNever || m == MetricsStale }

// Metrics is the state of l's figures at now: never when its scrapes have
// failed and none succeeded since it joined the fleet; stale when they
// have failed for longer than staleAfter (0: never stale). A pod no
// scrape has ended for yet is pending, not blind: it has just joined or
// become ready, and is likely as idle as it reads.
func (l *Load) Metrics(now time.Time, staleAfter time.Duration) Metrics {
	failing := l.FailingSince.Load()
	switch {
	case l.ScrapedAt.Load() == 0 && failing == 0:
		return MetricsPending
	case failing == 0:
		return MetricsOK
	case l.ScrapedAt.Load() == 0:
		return MetricsNever
	case staleAfter > 0 && now.UnixNano()-failing > int64(staleAfter):
		return MetricsStale
	}
	return MetricsOK
}
