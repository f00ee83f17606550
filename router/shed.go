package router

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kvrouter/kvrouter/router/fleet"
)

// HeaderObjective names a request's InferenceObjective (the Gateway API
// Inference Extension's), whose priority decides whether it may be shed.
const HeaderObjective = "x-gateway-inference-objective"

// shedRetryAfter is what a shed request is told to wait.
const shedRetryAfter = time.Second

// Objectives are the priorities of the InferenceObjectives requests name.
// A name not in it has priority 0.
type Objectives map[string]int

// Objective is one InferenceObjective as kvrouter's config file states it
// (an item of objectives): a name and its priority (below zero: sheddable
// when the pods are saturated).
type Objective struct {
	Name     string `yaml:"name"`
	Priority int    `yaml:"priority"`
}

// ObjectivesFrom checks a config file's objectives, every problem at once,
// each starting with its item ("[2]: no name"), and returns them.
func ObjectivesFrom(list []Objective) (Objectives, error) {
	o, errs := Objectives{}, []error(nil)
	for i, x := range list {
		switch _, dup := o[x.Name]; {
		case x.Name == "":
			errs = append(errs, fmt.Errorf("[%d]: no name", i))
		case dup:
			errs = append(errs, fmt.Errorf("[%d]: %q named twice", i, x.Name))
		default:
			o[x.Name] = x.Priority
		}
	}
	return o, errors.Join(errs...)
}

// SetObjectives replaces the objectives' priorities (from the config file,
// or the InferenceObjectives of the pool's namespace as they change).
func (r *Router) SetObjectives(o Objectives) {
	c := make(Objectives, len(o))
	for k, v := range o {
		c[k] = v
		if v < 0 {
			r.metrics.shed.WithLabelValues(k) // a sheddable objective's count exists, at zero, before its first shed
		}
	}
	r.objectives.Store(&c)
}

// priority resolves a request's objective: its priority and whether it is
// known. No objective is priority 0, known.
func (r *Router) priority(objective string) (int, bool) {
	if objective == "" {
		return 0, true
	}
	if o := r.objectives.Load(); o != nil {
		if p, ok := (*o)[objective]; ok {
			return p, true
		}
	}
	return 0, false
}

// shed refuses a sheddable request (priority below zero) with 429 when
// every candidate pod is saturated; it returns nil otherwise. Requests of
// priority zero and above are never shed.
func (r *Router) shed(req Request, model string, members []*fleet.Member, now time.Time) *Error {
	prio, known := r.priority(req.Objective)
	if !known {
		r.metrics.unknownObjectives.Inc()
	}
	if prio >= 0 {
		return nil
	}
	for _, m := range members {
		if !r.saturated(m, now) {
			return nil
		}
	}
	r.metrics.shed.WithLabelValues(req.Objective).Inc()
	return &Error{
		Status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", RetryAfter: shedRetryAfter,
		Message: fmt.Sprintf("every pod of model %q is saturated and objective %q (priority %d) is sheddable: retry later", model, req.Objective, prio),
	}
}

// saturated reports whether a pod is past the saturation thresholds: its
// waiting queue or its KV cache, by its last fresh figures. A pod whose
// figures are not fresh (blind) counts as saturated, as the reference
// picker's detector has it.
func (r *Router) saturated(m *fleet.Member, now time.Time) bool {
	if r.fleet.Scraped() && m.Load.Metrics(now, r.cfg.StaleMetricsAfter).Blind() {
		return true
	}
	l := m.Load
	return l.Waiting.Load() >= int64(r.cfg.SaturationWaiting) ||
		float64(l.KVUsagePermille.Load()) >= r.cfg.SaturationKV*1000
}
