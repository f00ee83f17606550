package router

import (
	"log/slog"
	"sync"
	"time"
)

// tokenizeErrorEvery bounds the "prompt not tokenized" lines of one model:
// the first, then one a minute carrying the count of those left out. A
// template that raises for every request says so once, not per request.
const tokenizeErrorEvery = time.Minute

// maxTokenizeErrorModels bounds the models tokenizeLog remembers; past it,
// every line is logged.
const maxTokenizeErrorModels = 4096

// tokenizeLog logs prompts that could not be tokenized at WARN, rate-limited
// per model.
type tokenizeLog struct {
	logger *slog.Logger
	mu     struct {
		sync.Mutex
		models map[string]*tokenizeErrors
	}
}

type tokenizeErrors struct {
	last    time.Time // the last line logged
	dropped int       // errors not logged since
}

func newTokenizeLog(logger *slog.Logger) *tokenizeLog {
	l := &tokenizeLog{logger: logger}
	l.mu.models = map[string]*tokenizeErrors{}
	return l
}

// log says that a prompt of model could not be tokenized, unless the model
// said so less than tokenizeErrorEvery ago.
func (l *tokenizeLog) log(now time.Time, model string, err error) {
	l.mu.Lock()
	e, ok := l.mu.models[model]
	if !ok && len(l.mu.models) < maxTokenizeErrorModels {
		e = &tokenizeErrors{}
		l.mu.models[model] = e
	}
	dropped := 0
	if e != nil {
		if ok && now.Sub(e.last) < tokenizeErrorEvery {
			e.dropped++
			l.mu.Unlock()
			return
		}
		e.last, dropped, e.dropped = now, e.dropped, 0
	}
	l.mu.Unlock()
	if dropped > 0 {
		l.logger.Warn("prompt not tokenized; routing by load", "model", model, "error", err, "errors_not_logged", dropped)
		return
	}
	l.logger.Warn("prompt not tokenized; routing by load", "model", model, "error", err)
}
