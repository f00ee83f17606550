package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
)

// serveOptions are the flags of `kvrouter serve`.
type serveOptions struct {
	adminAddr       string
	logLevel        string
	drainDelay      time.Duration
	shutdownTimeout time.Duration
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o serveOptions
	fs := newFlagSet("serve", "[flags]", stderr)
	fs.StringVar(&o.adminAddr, "admin-addr", ":9090", "address of the admin HTTP server (/healthz, /readyz, /metrics, /debug/pprof/)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.drainDelay, "drain-delay", 0, "on SIGTERM, how long to report not-ready before stopping, so load balancers stop sending work")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight work may take to finish once stopping")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	level, err := parseLogLevel(o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter serve: %v\n", err)
		fs.Usage()
		return errUsage
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	return serve(ctx, o, logger, stdout)
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("invalid -log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// serve runs every long-lived part until ctx is done, then drains: it reports
// not-ready, waits drainDelay, and stops the servers gracefully.
func serve(ctx context.Context, o serveOptions, logger *slog.Logger, stdout io.Writer) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfo(),
	)
	var ready atomic.Bool
	adminLn, err := net.Listen("tcp", o.adminAddr)
	if err != nil {
		return fmt.Errorf("serve: admin server: %w", err)
	}
	admin := &http.Server{
		Handler:           newAdminHandler(reg, ready.Load),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "kvrouter: admin server listening on http://%s\n", displayAddr(adminLn.Addr()))
	logger.Info("admin server listening", "addr", adminLn.Addr().String(), "version", version)

	// The servers stop on stopCtx, which the drainer cancels once ctx is done
	// and the drain delay has passed (or at once when a part failed).
	stopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(stopCtx, admin, adminLn, o.shutdownTimeout) })
	g.Go(func() error {
		defer stop()
		<-gctx.Done()
		ready.Store(false)
		if ctx.Err() == nil {
			return nil // a part failed: no drain
		}
		logger.Info("draining", "drain_delay", o.drainDelay.String())
		if o.drainDelay > 0 {
			t := time.NewTimer(o.drainDelay)
			defer t.Stop()
			<-t.C
		}
		return nil
	})
	ready.Store(true)
	err = g.Wait()
	logger.Info("stopped")
	return err
}

// serveHTTP serves srv on ln until ctx is done, then shuts it down, waiting at
// most timeout for open requests.
func serveHTTP(ctx context.Context, srv *http.Server, ln net.Listener, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
	}
	return nil
}

// displayAddr turns a wildcard listen address into one a user can open.
func displayAddr(a net.Addr) string {
	s := a.String()
	if host, port, err := net.SplitHostPort(s); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return net.JoinHostPort("localhost", port)
		}
	}
	return strings.TrimSpace(s)
}
