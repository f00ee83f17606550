package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/tracing"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
)

func newServeCommand(s streams) *cobra.Command {
	c := defaultConfig()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the router: ext_proc server, admin server, event subscribers",
		Long: `Run the router: the Envoy ext_proc gRPC server (and, with --http-addr, an
OpenAI-compatible proxy), the admin server, a KV-event subscriber per pod and
the pods' /metrics scraper. Settings come from the defaults, then the
--config file, then the flags given on the command line.`,
		Example: `  kvrouter serve --pod a=10.0.0.1:8000 --pod b=10.0.0.2:8000 --model Qwen/Qwen3-0.6B=/models/qwen --default-model Qwen/Qwen3-0.6B
  kvrouter serve --config /etc/kvrouter/kvrouter.yaml --log-level debug`,
		Args: noArgs,
	}
	serveFlags(&c, cmd.Flags())
	c.picker = epp.Register(cmd.Flags())
	var flagProblems []string
	lenientFlags(cmd.Flags(), &flagProblems)
	cmd.RunE = runE(func(cmd *cobra.Command) error {
		c.flagProblems = flagProblems
		return serve(cmd.Context(), configOver(c, cmd.Flags()), s.errOut)
	})
	return cmd
}

// serve validates c and runs the router until ctx is done.
func serve(ctx context.Context, c config, stderr io.Writer) error {
	c.applyEnv(os.Getenv)
	s, err := c.validate(os.Getenv("KUBERNETES_SERVICE_HOST"))
	if err != nil {
		return err
	}
	logger := newLogger(stderr, s.level, s.Log.Format)
	for _, note := range c.pickerNotes {
		logger.Info("kvrouter: an Endpoint Picker flag", "note", note)
	}
	stopTracing, err := tracing.Start(ctx, s.Tracing, version)
	if err != nil {
		return err
	}
	if s.Tracing.Enabled {
		logger.Info("tracing: exporting spans over OTLP", "to", tracing.Describe())
	}
	defer func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(flush); err != nil {
			logger.Warn("tracing: spans not all exported at stop", "error", err)
		}
	}()
	a, err := newApp(s, logger)
	if err != nil {
		return err
	}
	return a.serve(ctx, s)
}

// newLogger logs to w at level: JSON, text, or for "auto" text when w is a
// terminal and JSON otherwise (a container's log collector).
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" || (format == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// listen opens every configured listener before anything runs, so a busy
// port fails the start at once.
func listen(l listenConfig) (listeners, error) {
	var errs []error
	open := func(what, addr string) net.Listener {
		if addr == "" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s server: %w", what, err))
		}
		return ln
	}
	ls := listeners{
		admin: open("admin", l.Admin), grpc: open("ext_proc", l.GRPC),
		health: open("gRPC health", l.GRPCHealth), proxy: open("proxy", l.HTTP),
	}
	if err := errors.Join(errs...); err != nil {
		for _, ln := range []net.Listener{ls.admin, ls.grpc, ls.health, ls.proxy} {
			if ln != nil {
				_ = ln.Close()
			}
		}
		return listeners{}, fmt.Errorf("serve: %w", err)
	}
	return ls, nil
}

// listeners are the servers' sockets; nil for a server turned off.
type listeners struct {
	admin, grpc, health, proxy net.Listener
}

// serve runs every long-lived part until ctx is done, then drains: it reports
// not-ready, waits the drain delay, and stops the servers gracefully.
func (a *app) serve(ctx context.Context, s settings) error {
	ls, err := listen(s.Listen)
	if err != nil {
		return err
	}
	say := func(what string, ln net.Listener, scheme string, attrs ...any) {
		if ln != nil {
			a.logger.Info(what+" listening", append([]any{"addr", ln.Addr().String(), "url", scheme + displayAddr(ln.Addr()), "version", version}, attrs...)...)
		}
	}
	say("admin server", ls.admin, "http://")
	say("ext_proc gRPC server", ls.grpc, "", "tls", a.tlsMode())
	say("gRPC health server", ls.health, "")
	say("OpenAI proxy", ls.proxy, "http://")

	// The servers stop on stopCtx, which the drainer cancels once ctx is done
	// and the drain delay has passed (or at once when a part failed).
	stopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	a.start(stopCtx, g, ls, time.Duration(s.Shutdown.Timeout))
	// Ready at once with static pods; with discovery, once it synced. The
	// drainer waits for that decision so not-ready is the last word.
	if a.nothing {
		a.logger.Warn(nothingToRoute)
	}
	readied := make(chan struct{})
	if a.pods == nil {
		a.setReady(true, "")
		close(readied)
	} else {
		a.setReady(false, "waiting for the first list of pods from Kubernetes")
		g.Go(func() error { defer close(readied); a.readyWhenSynced(gctx); return nil })
	}
	g.Go(func() error {
		defer stop()
		<-gctx.Done()
		<-readied
		a.setReady(false, "stopping")
		if ctx.Err() == nil {
			return nil // a part failed: no drain
		}
		// Requests kvrouter holds are routed now, and no more are held: a
		// held request must not wait past the servers' shutdown.
		a.router.Drain()
		drain := time.Duration(s.Shutdown.DrainDelay)
		a.logger.Info("draining", "drain_delay", drain.String())
		if drain > 0 {
			t := time.NewTimer(drain)
			defer t.Stop()
			<-t.C
		}
		return nil
	})
	err = g.Wait()
	a.logger.Info("stopped")
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
