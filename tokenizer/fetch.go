package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ErrPending is returned for a model whose tokenizer files are being
// downloaded (or queued to be): the router routes its requests by load
// until they are here.
var ErrPending = errors.New("tokenizer: download under way")

// maxQueued bounds the models waiting for Run to fetch them; more are
// asked again by their next request.
const maxQueued = 256

// fetchWorkers is how many models Run downloads at once.
const fetchWorkers = 2

// Backoff of a failed download: retried after retryFirst, doubling up to
// retryMax.
const (
	retryFirst = 10 * time.Second
	retryMax   = 10 * time.Minute
)

// failure is why a model has no tokenizer, and for a failed download when
// it may be tried again.
type failure struct {
	err      error
	retry    time.Time // zero: no backoff (a local fault, checked again at once)
	attempts int
}

// Status is what a Registry knows of a model's tokenizer.
type Status struct {
	// Ready: the tokenizer was loaded (and is loaded again on demand).
	Ready bool
	// Pending: its files are queued or being downloaded.
	Pending bool
	// Err is why it has none; nil when ready, never asked for, or pending
	// for the first time (a retry of a failed download keeps its error).
	Err error
}

// Status returns what is known of a model's tokenizer without loading or
// downloading anything.
func (r *Registry) Status(model string) Status {
	name, err := r.cfg.base(model)
	if err != nil {
		return Status{Err: err}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return Status{Ready: r.mu.loaded[name], Pending: r.mu.queued[name], Err: r.mu.failures[name].err}
}

// Downloads is how many downloads the Registry started.
func (r *Registry) Downloads() int64 { return r.downloads.Load() }

// Prefetch queues a model to be fetched (downloaded when its files are
// missing) and loaded by Run, unless it was loaded already, is queued, or
// failed a download within its backoff. It never blocks.
func (r *Registry) Prefetch(model string) {
	name, err := r.cfg.base(model)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.loaded[name] {
		return
	}
	_ = r.enqueueLocked(name)
}

// downloading reports whether missing files are downloaded.
func (r *Registry) downloading() bool { return r.cfg.HubURL != "" && !r.cfg.Offline }

// request queues a model whose files are missing for download, and returns
// ErrPending, or the last download's failure while it is backed off.
func (r *Registry) request(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enqueueLocked(name); err != nil {
		return err
	}
	return fmt.Errorf("%w: model %q from %s", ErrPending, name, r.cfg.repo(name))
}

// enqueueLocked queues name unless it is queued or backed off. A model
// whose download failed stays failed, its failure returned, while it is
// backed off or tried again: only a success changes its state.
func (r *Registry) enqueueLocked(name string) error {
	f, failed := r.mu.failures[name]
	if r.mu.queued[name] || (failed && time.Now().Before(f.retry)) {
		return f.err
	}
	select {
	case r.queue <- name:
		r.mu.queued[name] = true
	default: // full: the next request asks again
	}
	return f.err
}

// fail records why a model has no tokenizer; a failed download is backed
// off.
func (r *Registry) fail(name string, err error, download bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := failure{err: err}
	if download {
		f.attempts = r.mu.failures[name].attempts + 1
		f.retry = time.Now().Add(min(retryFirst<<min(f.attempts-1, 10), retryMax))
	}
	r.mu.failures[name] = f
}

// Run fetches and loads the models For and Prefetch queue, a few at once,
// until ctx is done; it returns once its downloads have stopped.
func (r *Registry) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range fetchWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case name := <-r.queue:
					r.work(ctx, name)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// work fetches and loads one queued model.
func (r *Registry) work(ctx context.Context, name string) {
	_, err := r.Fetch(ctx, name)
	download := err != nil && r.downloading() // a local miss is checked again at once
	if err == nil {
		_, err = r.load(name)
	}
	if err != nil && ctx.Err() == nil {
		r.fail(name, err, download)
	}
	r.mu.Lock()
	delete(r.mu.queued, name)
	r.mu.Unlock()
}

// load is For of a base model whose files are here, which neither queues
// nor waits for a download.
func (r *Registry) load(name string) (*Tokenizer, error) {
	if _, err := r.Dir(name); err != nil {
		return nil, err
	}
	return r.For(name)
}

// Fetch returns the directory of a model's tokenizer files, downloading
// them into the cache first when they are missing and downloads are on.
// Concurrent calls for a model share one download, traced as a span
// kvrouter.tokenizer.download when tracing is on.
func (r *Registry) Fetch(ctx context.Context, model string) (string, error) {
	name, err := r.cfg.base(model)
	if err != nil {
		return "", err
	}
	dir, err := r.Dir(name)
	if !errors.Is(err, errNotCached) || !r.downloading() {
		return dir, err
	}
	v, err, _ := r.fetches.Do(name, func() (any, error) {
		if dir, err := r.Dir(name); err == nil {
			return dir, nil
		}
		r.downloads.Add(1)
		repo := r.cfg.repo(name)
		ctx, span := otel.Tracer("github.com/kvrouter/kvrouter/tokenizer").Start(ctx, "kvrouter.tokenizer.download",
			trace.WithAttributes(attribute.String("kvrouter.model", name), attribute.String("kvrouter.hub_repository", repo.String())))
		defer span.End()
		dir, err := r.download(ctx, name, repo)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		return dir, err
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}
