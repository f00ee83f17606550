package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// watchEvery is how often the models' tokenizers and templates are checked.
const watchEvery = time.Second

// checkModels loads the configured tokenizer directories and their chat
// templates: a directory that does not load, or a configured template the
// model's files do not resolve (a name it lacks), fails the start. A model
// without a chat template of its own is not a fault: its chat requests are
// routed by load, and Health says so.
func (a *app) checkModels(s settings) error {
	bad := &conf.Problems{}
	for _, name := range slices.Sorted(maps.Keys(s.tok.Models)) {
		if _, err := a.tokenizers.For(name); err != nil {
			bad.Add("tokenizers.models.%s: %v", name, err)
			continue
		}
		a.health.Set(name, router.PartTokenizer, nil)
		err := a.templateErr(name)
		if s.chats[name].Named != "" && err != nil { // a name the files lack
			bad.Add("tokenizers.models.%s.chat_template: %v", name, err)
			continue
		}
		a.health.Set(name, router.PartChatTemplate, err)
	}
	return bad.Err()
}

// templateErr is why a model whose files are here has no chat template for
// requests without their own; nil when it has one.
func (a *app) templateErr(name string) error {
	t, err := a.chats.For(name)
	if err != nil {
		return err
	}
	return t.Check()
}

// watchModels keeps every model kvrouter knows of (configured, or served by
// a pod) fetched and its parts' health current, until ctx is done.
func (a *app) watchModels(ctx context.Context, configured []string) error {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		a.checkParts(configured)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// checkParts queues the models whose tokenizers are missing for Run to
// fetch, and tells Health what each model has.
func (a *app) checkParts(configured []string) {
	names := map[string]bool{}
	for _, n := range configured {
		names[n] = true
	}
	for _, p := range a.fleet.Pods() {
		if p.Model != "" {
			names[p.Model] = true
		}
	}
	for name := range names { // Health keys them as the router does
		if !a.router.Tokenizes(name) {
			continue // rendered, or routed by load: no tokenizer to fetch
		}
		st := a.tokenizers.Status(name)
		switch {
		case st.Ready:
			a.health.Set(name, router.PartTokenizer, nil)
			a.health.Refresh(name, router.PartChatTemplate, a.templateErr(name))
		case st.Err != nil: // retried in the background, missing until it succeeds
			a.health.Refresh(name, router.PartTokenizer, st.Err)
			a.tokenizers.Prefetch(name) // again, once its backoff ends
		case st.Pending:
			a.health.Set(name, router.PartTokenizer, fmt.Errorf("%w: model %q", tokenizer.ErrPending, name))
		default:
			a.tokenizers.Prefetch(name)
		}
	}
}

// degraded says which models are routed by load alone, and why, for
// /readyz: "" when none is.
func (a *app) degraded() string {
	missing := a.health.Missing()
	if len(missing) == 0 {
		return ""
	}
	parts := make([]string, len(missing))
	for i, m := range missing {
		parts[i] = fmt.Sprintf("%s %s (%s)", m.Model, m.Part, m.Reason)
	}
	return "; routed by load alone for want of a part: " + strings.Join(parts, ", ")
}

// tokenization says, for /debug/pods, how a model's requests are routed:
// "exact", or by load and why.
func tokenization(states []router.PartState, model string) string {
	var why []string
	for _, s := range states {
		if s.Model == model && !s.Ready {
			why = append(why, fmt.Sprintf("%s missing (%s): %s", s.Part, s.Reason, s.Error))
		}
	}
	if len(why) == 0 {
		return "exact"
	}
	return "by load: " + strings.Join(why, "; ")
}
