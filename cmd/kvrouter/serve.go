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

	"golang.org/x/sync/errgroup"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := loadConfig(args, stderr)
	if err != nil {
		return err
	}
	s, err := c.validate(os.Getenv("KUBERNETES_SERVICE_HOST"))
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: s.level}))
	a, err := newApp(s, logger)
	if err != nil {
		return err
	}
	return a.serve(ctx, s, stdout)
}

// listen opens every configured listener before anything runs, so a busy
// port fails the start at once.
func listen(l listenConfig) (admin, grpc, proxy net.Listener, err error) {
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
	admin, grpc, proxy = open("admin", l.Admin), open("ext_proc", l.GRPC), open("proxy", l.HTTP)
	if err := errors.Join(errs...); err != nil {
		for _, ln := range []net.Listener{admin, grpc, proxy} {
			if ln != nil {
				_ = ln.Close()
			}
		}
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	return admin, grpc, proxy, nil
}

// serve runs every long-lived part until ctx is done, then drains: it reports
// not-ready, waits the drain delay, and stops the servers gracefully.
func (a *app) serve(ctx context.Context, s settings, stdout io.Writer) error {
	adminLn, grpcLn, proxyLn, err := listen(s.Listen)
	if err != nil {
		return err
	}
	say := func(what string, ln net.Listener, scheme string) {
		if ln != nil {
			fmt.Fprintf(stdout, "kvrouter: %s listening on %s%s\n", what, scheme, displayAddr(ln.Addr()))
			a.logger.Info(what+" listening", "addr", ln.Addr().String(), "version", version)
		}
	}
	say("admin server", adminLn, "http://")
	say("ext_proc gRPC server", grpcLn, "")
	say("OpenAI proxy", proxyLn, "http://")

	// The servers stop on stopCtx, which the drainer cancels once ctx is done
	// and the drain delay has passed (or at once when a part failed).
	stopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	a.start(stopCtx, g, adminLn, grpcLn, proxyLn, time.Duration(s.Shutdown.Timeout))
	// Ready at once with static pods; with discovery, once it synced. The
	// drainer waits for that decision so not-ready is the last word.
	readied := make(chan struct{})
	if a.pods == nil {
		a.setReady(true)
		close(readied)
	} else {
		g.Go(func() error { defer close(readied); a.readyWhenSynced(gctx); return nil })
	}
	g.Go(func() error {
		defer stop()
		<-gctx.Done()
		<-readied
		a.setReady(false)
		if ctx.Err() == nil {
			return nil // a part failed: no drain
		}
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
