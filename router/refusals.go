package router

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// refusalsPerSecond bounds the refusals logged each second: a flood of bad
// requests must not flood the log. The count of those left out rides on the
// next line logged.
const refusalsPerSecond = 20

// refusalLog logs refused requests at INFO, rate-limited.
type refusalLog struct {
	logger  *slog.Logger
	mu      sync.Mutex
	second  int64 // the Unix second n counts
	n       int   // refusals logged in that second
	dropped int   // refusals not logged since the last line
}

// Refused counts one refused request in kvrouter_router_refusals_total and
// logs it once, at INFO: its id, path, model ("" when not read yet),
// status and why. Route reports its own refusals; the front ends call it
// for those they make before routing (a body too large).
func (r *Router) Refused(id, path, model string, e *Error) {
	r.metrics.refused(e)
	r.refusals.log(time.Now(), id, path, model, e)
}

func (l *refusalLog) log(now time.Time, id, path, model string, e *Error) {
	l.mu.Lock()
	if s := now.Unix(); s != l.second {
		l.second, l.n = s, 0
	}
	if l.n >= refusalsPerSecond {
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.n++
	dropped := l.dropped
	l.dropped = 0
	l.mu.Unlock()
	attrs := []slog.Attr{
		slog.String("request_id", id), slog.String("path", path), slog.String("model", model),
		slog.Int("status", e.Status), slog.String("type", e.Type), slog.String("reason", e.Message),
	}
	if e.Param != "" {
		attrs = append(attrs, slog.String("param", e.Param))
	}
	if dropped > 0 {
		attrs = append(attrs, slog.Int("refusals_not_logged", dropped))
	}
	l.logger.LogAttrs(context.Background(), slog.LevelInfo, "request refused", attrs...)
}
