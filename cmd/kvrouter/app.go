package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer/chat"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/certs"
	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/internal/kube"
	"github.com/kvrouter/kvrouter/internal/kubeauth"
	"github.com/kvrouter/kvrouter/internal/proxy"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// registry is where every part registers its metrics and what /metrics
// serves.
type registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// app is kvrouter's parts, wired.
type app struct {
	logger *slog.Logger
	reg    registry
	// notReady says why the app is not ready ("starting" until serve says
	// otherwise); nil while it is.
	notReady atomic.Pointer[string]
	// readyMu orders the readiness changes: phase is what serve last set
	// (nil until it did, "" for ready), poolProblem why the InferencePool
	// cannot be served ("" while it can); either not ready is not ready.
	readyMu     sync.Mutex
	phase       *string
	poolProblem string
	// nothing is set when no pod can ever be known: no static pods, no
	// pods file, no discovery.
	nothing bool
	index   *kvindex.Index
	// shared is the redis backend over index; nil with the memory backend.
	shared  *redisindex.Index
	fleet   *fleet.Fleet
	router  *router.Router
	events  *kvevents.Manager
	ext     *extproc.Server
	proxy   *proxy.Proxy
	scraper *fleet.Scraper
	pods    *discovery.Discovery // nil without Kubernetes
	static  *discovery.Static    // --pod, pods.static and the pods file
	certs   *certs.Source        // nil: the ext_proc port is plaintext
	// auth guards the admin endpoints beyond the probes; nil: open.
	auth *kubeauth.Authorizer
	// debug serves the debug endpoints.
	debug bool
	// adminSlots holds a token per admin request served (probes aside),
	// admin.max_concurrent at most; adminShed counts those refused.
	adminSlots chan struct{}
	adminShed  prometheus.Counter
	// tokenizers are the models' tokenizers, for /debug/tokenizers; chats
	// their chat templates.
	tokenizers *tokenizer.Registry
	chats      *chat.Registry
	// health says which models' tokenizers and templates are missing.
	health *router.Health
	// models are the models the configuration names, watched from the
	// start.
	models []string
	// staleAfter is routing.stale_metrics_after, for /debug/pods;
	// defaultEngine is pods.default_engine.
	staleAfter    time.Duration
	defaultEngine string
}

// newApp builds every part from validated settings. A tokenizer or pods
// file that fails to load is a configuration problem.
func newApp(s settings, logger *slog.Logger) (*app, error) {
	return newAppOn(s, logger, prometheus.NewRegistry())
}

// newAppOn is newApp with the parts' metrics registered on reg.
func newAppOn(s settings, logger *slog.Logger, reg registry) (*app, error) {
	a := &app{logger: logger, reg: reg}
	starting := "starting"
	a.notReady.Store(&starting)
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newBuildInfo())
	if err := a.build(s); err != nil {
		return nil, err
	}
	sink := newFleetSink(a.fleet, a.events, a.logger)
	if s.disc.Kubeconfig != "" {
		discovery.RouteClientLogs(a.logger)
		d, err := discovery.New(s.disc, sink, a.reg, a.logger)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		a.pods = d
		if s.disc.Pool.Name != "" {
			d.OnPool(a.setPoolProblem)
			// The pool's InferenceObjectives win over the config's of the
			// same name.
			d.OnObjectives(func(fromCluster map[string]int) {
				merged := router.Objectives{}
				maps.Copy(merged, s.objectives)
				maps.Copy(merged, fromCluster)
				a.router.SetObjectives(merged)
			})
		}
	}
	parse := discovery.PodsFileParser(s.Pods.File, s.static, s.Pods.DefaultModel)
	static, err := discovery.NewStatic(s.static, s.Pods.File, parse, time.Duration(s.Pods.FileInterval), sink, a.reg, a.logger)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	a.static = static
	a.nothing = a.pods == nil && len(s.static) == 0 && s.Pods.File == ""
	if err := a.static.Reload(); err != nil {
		// The pods file changed since validate read it. Say what is wrong
		// as validate does: Reload's error wraps the read error or
		// pod.ParseFile's problems one level down.
		if cause := errors.Unwrap(err); cause != nil {
			err = cause
		}
		return nil, &conf.Problems{List: []string{s.locate("pods.file: " + err.Error())}}
	}
	return a, nil
}

func (a *app) build(s settings) error {
	var err error
	if a.index, err = kvindex.New(s.index, a.reg); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var idx interface {
		router.Index
		kvevents.PodIndex
	} = a.index
	if s.redis != nil {
		if a.shared, err = redisindex.New(*s.redis, a.index, s.index, a.logger, a.reg); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		idx = a.shared
	}
	hasher, err := blockhash.NewHasher(s.hash)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	toks, err := tokenizer.NewRegistry(s.tok)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a.tokenizers, a.chats = toks, chat.NewRegistry(toks, s.chats)
	if a.health, err = router.NewHealth(a.logger, a.reg); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// Load the configured tokenizers now: a bad directory fails the start,
	// and no request pays for a load.
	if err := a.checkModels(s); err != nil {
		return err
	}
	a.models = slices.Sorted(maps.Keys(s.Tokenizers.Models))
	a.fleet = fleet.New(idx)
	tokens := router.RegistryTokenizers{Registry: toks, Chats: a.chats, Health: a.health}
	if a.router, err = router.New(s.router, a.fleet, idx, hasher, tokens, a.logger, a.reg); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a.router.SetObjectives(s.objectives)
	if a.shared != nil {
		a.shared.ShareHomes(a.router) // before Run: its lease ticks share them
	}
	if a.events, err = kvevents.NewManager(s.events, idx, a.reg, a.logger); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a.debug = s.Admin.Debug
	a.adminSlots = make(chan struct{}, s.Admin.MaxConcurrent)
	a.adminShed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kvrouter", Subsystem: "admin", Name: "requests_shed_total",
		Help: "Admin requests refused with 429 because admin.max_concurrent were being served.",
	})
	if err := a.reg.Register(a.adminShed); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if s.adminAuth {
		client, err := kube.NewClient(s.disc.Kubeconfig)
		if err != nil {
			return fmt.Errorf("serve: admin.auth: %w", err)
		}
		if a.auth, err = kubeauth.New(client, a.logger, a.reg); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	if s.certs != nil {
		if a.certs, err = certs.New(*s.certs, a.logger, a.reg); err != nil {
			return &conf.Problems{List: []string{s.locate("extproc.tls: " + err.Error())}}
		}
		s.ext.TLS = a.certs.TLSConfig()
	}
	if a.ext, err = extproc.New(s.ext, a.router, a.logger, a.reg); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a.proxy = proxy.New(a.router, int64(s.ext.MaxBodyBytes), nil, a.logger)
	a.staleAfter, a.defaultEngine = s.router.StaleMetricsAfter, s.events.DefaultEngine
	if a.scraper, err = fleet.NewScraper(a.fleet, nil, time.Duration(s.Pods.MetricsInterval), a.staleAfter, a.logger, a.reg); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a.scraper.DefaultEngine = a.defaultEngine
	return nil
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// readyWhenSynced reports ready once discovery has listed the pods, or
// returns when ctx is done first.
func (a *app) readyWhenSynced(ctx context.Context) {
	select {
	case <-a.pods.Synced():
		if ctx.Err() == nil {
			a.setReady(true, "")
		}
	case <-ctx.Done():
	}
}

// setReady reports ready, or not ready for the reason why. Ready with
// nothing to route to, or with an InferencePool that cannot be served, is
// not ready.
func (a *app) setReady(ready bool, why string) {
	a.readyMu.Lock()
	defer a.readyMu.Unlock()
	if ready {
		why = ""
	}
	a.phase = &why
	a.applyReadyLocked()
}

// setPoolProblem is told by discovery why its InferencePool cannot be
// served, or "" once it can.
func (a *app) setPoolProblem(why string) {
	a.readyMu.Lock()
	defer a.readyMu.Unlock()
	a.poolProblem = why
	if a.phase != nil {
		a.applyReadyLocked()
	}
}

func (a *app) applyReadyLocked() {
	why := *a.phase
	switch {
	case why == "":
		why = a.poolProblem
	case a.poolProblem != "":
		why += "; " + a.poolProblem
	}
	if why == "" && a.nothing {
		why = nothingToRoute
	}
	if why == "" {
		a.notReady.Store(nil)
	} else {
		a.notReady.Store(&why)
	}
	a.ext.SetReady(why == "")
}

// nothingToRoute is why a serve that can know no pod is not ready.
const nothingToRoute = "nothing to route to: no pod is given (--pod, pods.static, --pods-file) and Kubernetes discovery is off (--kubeconfig); every request would be refused with 503"

// readiness is /readyz's answer: whether the app is ready, and a line that
// says why, or what it routes to.
func (a *app) readiness() (bool, string) {
	detail := ""
	if a.shared != nil {
		if up, since := a.shared.Up(); !up {
			detail = fmt.Sprintf("; the shared index's Redis is unreachable since %s: matching on this replica's own view", since.UTC().Format(time.RFC3339))
		}
		if a.shared.Unbounded() {
			detail += "; the shared index's block keys have no TTL (index.redis.ttl: 0) and Redis's maxmemory does not bound them: set maxmemory with maxmemory-policy allkeys-lfu"
		}
	}
	if why := a.notReady.Load(); why != nil {
		if a.pods != nil && !isClosed(a.pods.Synced()) {
			if e := a.pods.ListError(); e != "" {
				detail = "; the API server: " + e + detail
			}
		}
		return false, "not ready: " + *why + detail
	}
	switch n := len(a.fleet.Snapshot().Members()); n {
	case 0:
	case 1:
		return true, "ready: 1 pod to route to" + a.degraded() + detail
	default:
		return true, fmt.Sprintf("ready: %d pods to route to", n) + a.degraded() + detail
	}
	return true, "ready, but no pod is ready now: requests are refused with 503 until one is" + a.degraded() + detail
}

// start runs every part in g; the servers stop when stop is done.
func (a *app) start(stop context.Context, g *errgroup.Group, ls listeners, timeout time.Duration) {
	errLog := slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)
	admin := &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
	g.Go(func() error { return serveHTTP(stop, admin, ls.admin, timeout) })
	if ls.grpc != nil {
		g.Go(func() error { return a.ext.Run(stop, ls.grpc) })
	}
	if ls.health != nil {
		g.Go(func() error { return a.ext.RunHealth(stop, ls.health) })
	}
	if ls.proxy != nil {
		proxy := &http.Server{Handler: a.proxy, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
		g.Go(func() error { return serveHTTP(stop, proxy, ls.proxy, timeout) })
	}
	g.Go(func() error { return a.events.Run(stop) })
	if a.certs != nil {
		g.Go(func() error { return a.certs.Run(stop) })
	}
	g.Go(func() error { return a.scraper.Run(stop) })
	g.Go(func() error { return a.static.Run(stop) })
	if a.pods != nil {
		g.Go(func() error { return a.pods.Run(stop) })
	}
	g.Go(func() error { return sweep(stop, a.index) })
	g.Go(func() error { return a.tokenizers.Run(stop) })
	g.Go(func() error { return a.watchModels(stop, a.models) })
	if a.shared != nil {
		g.Go(func() error { return a.shared.Run(stop) })
	}
}

// tlsMode says how the ext_proc port serves: off, self-signed or files,
// with "+mtls" when client certificates are verified.
func (a *app) tlsMode() string {
	switch {
	case a.certs == nil:
		return "off"
	case a.certs.SelfSigned() && !a.certs.MutualTLS():
		return "self-signed"
	case a.certs.SelfSigned():
		return "self-signed+mtls"
	case a.certs.MutualTLS():
		return "files+mtls"
	}
	return "files"
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
