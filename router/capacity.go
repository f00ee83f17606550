package router

import (
	"context"
	"time"
)

// Scale from zero. A pool that scales its model servers down to zero (KEDA,
// an HPA on external metrics) has no pod when the next request comes. With
// Config.ScaleFromZeroWait, such a request waits for a ready pod of its
// model instead of being refused at once, and is counted in
// waiting_requests{model}, the signal the pool is scaled up on. Past the
// wait it is refused as it would have been (503, or 404 for a model no pod
// ever served). Only models a pod ever served or with a configured
// tokenizer wait, so a mistyped model name is refused at once and the
// gauge's labels stay bounded.

// configured is what the tokenizers say of a model's configuration
// (RegistryTokenizers implements it).
type configured interface {
	Configured(model string) bool
}

// waitsForCapacity reports whether a request for model, refused with e,
// waits for a ready pod.
func (r *Router) waitsForCapacity(e *Error, model string) bool {
	if r.cfg.ScaleFromZeroWait <= 0 || e == nil || !e.noPod {
		return false
	}
	if r.fleet.Known(model) {
		return true
	}
	c, ok := r.tok.(configured)
	return ok && c.Configured(model)
}

// awaitCapacity waits until model has a ready pod, ScaleFromZeroWait has
// passed or ctx is done, and reports whether it has one.
func (r *Router) awaitCapacity(ctx context.Context, model string, subset *Subset) bool {
	g := r.metrics.waiting.WithLabelValues(model)
	g.Inc()
	defer g.Dec()
	timer := time.NewTimer(r.cfg.ScaleFromZeroWait)
	defer timer.Stop()
	for {
		changed := r.fleet.Changed()
		if r.hasReady(model, subset) {
			r.metrics.capacityWaits.WithLabelValues("routed").Inc()
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			r.metrics.capacityWaits.WithLabelValues("timeout").Inc()
			return false
		case <-ctx.Done():
			r.metrics.capacityWaits.WithLabelValues("canceled").Inc()
			return false
		}
	}
}

// hasReady reports whether a ready pod of model is in the fleet.
func (r *Router) hasReady(model string, subset *Subset) bool {
	t := r.fleet.Snapshot().Target(model)
	if t == nil {
		return false
	}
	for _, m := range t.Members {
		if m.Pod.Ready && subset.Allows(m.Endpoint) {
			return true
		}
	}
	return false
}
