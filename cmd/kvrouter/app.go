package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// app is kvrouter's parts, wired.
type app struct {
	logger  *slog.Logger
	reg     *prometheus.Registry
	ready   atomic.Bool
	index   *kvindex.Index
	fleet   *router.Fleet
	router  *router.Router
	events  *kvevents.Manager
	ext     *extproc.Server
	proxy   *router.Proxy
	scraper *router.Scraper
	pods    *discovery.Discovery // nil without Kubernetes
}

// newApp builds every part from the options, reporting every configuration
// problem at once.
func newApp(o serveOptions, logger *slog.Logger) (*app, error) {
	a := &app{logger: logger, reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newBuildInfo())
	pods, models, errs := parseSources(o)
	hashCfg := kvindex.HashConfig{Algorithm: kvindex.Algorithm(o.hashAlgo), Seed: o.hashSeed, BlockSize: o.blockSize}
	idxCfg := kvindex.DefaultConfig()
	idxCfg.MaxEntries = o.maxEntries
	extCfg := extproc.DefaultConfig()
	extCfg.BodyMode, extCfg.MaxBodyBytes = extproc.BodyMode(o.bodyMode), o.maxBodyBytes
	evCfg := kvevents.DefaultConfig()
	evCfg.Hash = hashCfg
	tokCfg := tokenizer.DefaultConfig()
	tokCfg.Models, tokCfg.HFCache = models, o.hfCache
	checks := []error{hashCfg.Validate(), idxCfg.Validate(), extCfg.Validate(), evCfg.Validate(), tokCfg.Validate()}
	discCfg := discoveryConfig(o)
	if o.kubeconfig != "" {
		checks = append(checks, discCfg.Validate())
	}
	for _, err := range checks {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if err := a.build(idxCfg, hashCfg, tokCfg, evCfg, extCfg, int64(o.maxBodyBytes)); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if o.kubeconfig != "" {
		discovery.RouteClientLogs(a.logger)
		d, err := discovery.New(discCfg, fleetSink{a.fleet, a.events, a.logger}, a.reg, a.logger)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		a.pods = d
	}
	return a, a.addStaticPods(pods, o.defaultModel)
}

// parseSources reads the --pod and --model flags.
func parseSources(o serveOptions) ([]staticPod, map[string]string, []error) {
	var errs []error
	var pods []staticPod
	for _, s := range o.pods {
		p, err := parseStaticPod(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p.model == "" && o.defaultModel == "" {
			errs = append(errs, fmt.Errorf("pod %s names no model and there is no -default-model", p.name))
		}
		pods = append(pods, p)
	}
	models := map[string]string{}
	for _, s := range o.models {
		name, dir, ok := strings.Cut(s, "=")
		if !ok || name == "" || dir == "" {
			errs = append(errs, fmt.Errorf("model %q: want NAME=DIR", s))
			continue
		}
		models[name] = dir
	}
	return pods, models, errs
}

func (a *app) build(idxCfg kvindex.Config, hashCfg kvindex.HashConfig, tokCfg tokenizer.Config, evCfg kvevents.Config, extCfg extproc.Config, maxBody int64) error {
	var err error
	if a.index, err = kvindex.New(idxCfg, a.reg); err != nil {
		return err
	}
	hasher, err := kvindex.NewHasher(hashCfg)
	if err != nil {
		return err
	}
	toks, err := tokenizer.NewRegistry(tokCfg)
	if err != nil {
		return err
	}
	// Load the configured tokenizers now: a bad directory fails the start,
	// and no request pays for a load.
	for name := range tokCfg.Models {
		if _, err := toks.For(name); err != nil {
			return fmt.Errorf("model %s: %w", name, err)
		}
	}
	a.fleet = router.NewFleet(a.index)
	tokens := router.RegistryTokenizers{Registry: toks, Chats: tokenizer.NewChats(toks, nil)}
	if a.router, err = router.New(router.DefaultConfig(), a.fleet, a.index, hasher, tokens, a.logger, a.reg); err != nil {
		return err
	}
	if a.events, err = kvevents.NewManager(evCfg, a.index, a.reg, a.logger); err != nil {
		return err
	}
	if a.ext, err = extproc.New(extCfg, a.router, a.logger, a.reg); err != nil {
		return err
	}
	a.proxy = router.NewProxy(a.router, maxBody, nil, a.logger)
	a.scraper = router.NewScraper(a.fleet, nil, 0, a.logger)
	return nil
}

// addStaticPods puts the --pod pods in the fleet and follows their events.
func (a *app) addStaticPods(pods []staticPod, defaultModel string) error {
	for _, p := range pods {
		model := p.model
		if model == "" {
			model = defaultModel
		}
		a.fleet.Upsert(router.Pod{Name: p.name, Address: p.address(), Model: model, Ready: true})
		err := a.events.Ensure(kvevents.Pod{Name: p.name, IP: p.ip, EventPort: p.events, ReplayPort: p.replay, Model: model})
		if err != nil {
			return fmt.Errorf("serve: pod %s: %w", p.name, err)
		}
	}
	return nil
}

// readyWhenSynced reports ready once discovery has listed the pods, or
// returns when ctx is done first.
func (a *app) readyWhenSynced(ctx context.Context) {
	select {
	case <-a.pods.Synced():
		if ctx.Err() == nil {
			a.setReady(true)
		}
	case <-ctx.Done():
	}
}

func (a *app) setReady(ready bool) {
	a.ready.Store(ready)
	a.ext.SetReady(ready)
}

// start runs every part in g; the servers stop when stop is done.
func (a *app) start(stop context.Context, g *errgroup.Group, adminLn, grpcLn, proxyLn net.Listener, timeout time.Duration) {
	errLog := slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)
	admin := &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
	g.Go(func() error { return serveHTTP(stop, admin, adminLn, timeout) })
	if grpcLn != nil {
		g.Go(func() error { return a.ext.Run(stop, grpcLn) })
	}
	if proxyLn != nil {
		proxy := &http.Server{Handler: a.proxy, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
		g.Go(func() error { return serveHTTP(stop, proxy, proxyLn, timeout) })
	}
	g.Go(func() error { return a.events.Run(stop) })
	g.Go(func() error { return a.scraper.Run(stop) })
	if a.pods != nil {
		g.Go(func() error { return a.pods.Run(stop) })
	}
	g.Go(func() error { return sweep(stop, a.index) })
}

// sweep frees expired speculative index entries every second.
func sweep(ctx context.Context, x *kvindex.Index) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			x.Sweep()
		}
	}
}
