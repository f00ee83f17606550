package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
)

// serveOptions are the flags of `kvrouter serve`.
type serveOptions struct {
	adminAddr, grpcAddr, httpAddr string
	logLevel                      string
	drainDelay, shutdownTimeout   time.Duration
	pods, models                  listFlag
	hfCache, defaultModel         string
	hashAlgo, hashSeed            string
	blockSize, maxEntries         int
	bodyMode                      string
	maxBodyBytes                  int
	kubeconfig, selector          string
	namespaces                    listFlag
}

func serveFlags(o *serveOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", "[flags]", stderr)
	fs.StringVar(&o.adminAddr, "admin-addr", ":9090", "admin HTTP server: /healthz, /readyz, /metrics, /debug/pprof/, /debug/pods, POST /v1/score")
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":9002", "Envoy ext_proc gRPC server; empty: off")
	fs.StringVar(&o.httpAddr, "http-addr", "", "standalone OpenAI-compatible HTTP proxy (no Envoy needed); empty: off")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.drainDelay, "drain-delay", 0, "on SIGTERM, how long to report not-ready before stopping, so load balancers stop sending work")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight work may take to finish once stopping")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "discover vLLM pods in Kubernetes with this kubeconfig file, \"in-cluster\" or \"off\"; default: in-cluster when KUBERNETES_SERVICE_HOST is set, else off")
	fs.Var(&o.namespaces, "namespace", "a namespace to discover pods in (repeatable); default: all")
	fs.StringVar(&o.selector, "selector", discovery.DefaultConfig().Selector, "the label selector of the vLLM pods to discover")
	fs.Var(&o.pods, "pod", "a vLLM pod without Kubernetes: name=ip:port[,model=M][,events=PORT][,replay=PORT] (repeatable)")
	fs.Var(&o.models, "model", "a model's tokenizer directory (tokenizer.json, tokenizer_config.json): NAME=DIR (repeatable)")
	fs.StringVar(&o.hfCache, "hf-cache", "", "a Hugging Face hub cache directory searched for tokenizers of other models")
	fs.StringVar(&o.defaultModel, "default-model", "", "the model of pods that do not name one")
	fs.StringVar(&o.hashAlgo, "hash-algo", string(kvindex.SHA256), "the pods' --prefix-caching-hash-algo: sha256 or sha256_cbor")
	fs.StringVar(&o.hashSeed, "hash-seed", kvindex.DefaultSeed, "the pods' PYTHONHASHSEED (vLLM >= 0.30 uses \"vllm-none-hash\" when unset)")
	fs.IntVar(&o.blockSize, "block-size", kvindex.DefaultBlockSize, "the pods' KV cache block size in tokens")
	fs.IntVar(&o.maxEntries, "max-index-entries", kvindex.DefaultConfig().MaxEntries, "bound on (block, pod) index entries; about 45 bytes each")
	fs.StringVar(&o.bodyMode, "body-mode", string(extproc.FullDuplexStreamed), "the request body mode Envoy's ext_proc filter uses: FULL_DUPLEX_STREAMED or BUFFERED")
	fs.IntVar(&o.maxBodyBytes, "max-body-bytes", extproc.DefaultConfig().MaxBodyBytes, "largest request body accepted (413 beyond)")
	return fs
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o serveOptions
	fs := serveFlags(&o, stderr)
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
	o.kubeconfig = resolveKubeconfig(o.kubeconfig, os.Getenv("KUBERNETES_SERVICE_HOST"))
	a, err := newApp(o, logger)
	if err != nil {
		return err
	}
	return a.serve(ctx, o, stdout)
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("invalid -log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// listen opens every configured listener before anything runs, so a busy
// port fails the start at once.
func listen(o serveOptions) (admin, grpc, proxy net.Listener, err error) {
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
	admin, grpc, proxy = open("admin", o.adminAddr), open("ext_proc", o.grpcAddr), open("proxy", o.httpAddr)
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
func (a *app) serve(ctx context.Context, o serveOptions, stdout io.Writer) error {
	adminLn, grpcLn, proxyLn, err := listen(o)
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
	a.start(stopCtx, g, adminLn, grpcLn, proxyLn, o.shutdownTimeout)
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
		a.logger.Info("draining", "drain_delay", o.drainDelay.String())
		if o.drainDelay > 0 {
			t := time.NewTimer(o.drainDelay)
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
