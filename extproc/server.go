package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/router"
)

// Router decides where a request goes.
type Router interface {
	// Route decides for req. It must keep no reference to req.Body (nor
	// to a slice of it) once it returns: the server recycles the buffer.
	Route(ctx context.Context, req router.Request) (*router.Decision, error)
	// Refused logs a request the server refuses before routing it.
	Refused(id, path, model string, e *router.Error)
}

// The gRPC health services Envoy and Kubernetes probe; inference-extension
// is what the Endpoint Picker charts' probes ask for with one replica.
var healthServices = []string{"", "liveness", "readiness", "inference-extension", extprocv3.ExternalProcessor_ServiceDesc.ServiceName}

// Server is kvrouter's Envoy external processor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg     Config
	router  Router
	logger  *slog.Logger
	metrics *metrics
	health  *health.Server
	codec   codec
	bodies  bodyPool
	// streams holds a token per open stream, MaxStreams at most.
	streams chan struct{}
}

// New returns a server that routes with r. reg receives its metrics.
func New(cfg Config, r Router, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	c, err := newCodec()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, router: r, logger: logger, metrics: m, health: health.NewServer(), codec: c, streams: make(chan struct{}, cfg.MaxStreams)}
	s.SetReady(false)
	return s, nil
}

// SetReady sets what the readiness and ext_proc health services report;
// liveness always reports serving while the server runs.
func (s *Server) SetReady(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range healthServices {
		if name != "liveness" {
			s.health.SetServingStatus(name, st)
		}
	}
	s.health.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
}

// Run serves on lis until ctx is done, then reports not ready and drains:
// open streams get Config.DrainTimeout to finish before they are cut.
func (s *Server) Run(ctx context.Context, lis net.Listener) error {
	// No stats handler or interceptor: streams reuse their body-chunk
	// message and recycle the request body once Send has marshaled it,
	// which a handler that reads sent messages later would see changed.
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.maxRecvMsgBytes()), grpc.MaxSendMsgSize(s.cfg.maxRecvMsgBytes()),
		grpc.ForceServerCodecV2(s.codec),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	gs := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("extproc: serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	s.SetReady(false)
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	t := time.NewTimer(s.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		gs.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("extproc: serve %s: %w", lis.Addr(), err)
	}
	return nil
}

// RunHealth serves only the gRPC health service on lis, in plaintext, until
// ctx is done: the same statuses as Run's, for probes that cannot speak TLS.
func (s *Server) RunHealth(ctx context.Context, lis net.Listener) error {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, s.health)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("extproc: serve health %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	gs.Stop() // health calls are unary and short: nothing to drain
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("extproc: serve health %s: %w", lis.Addr(), err)
	}
	return nil
}

// Process handles one HTTP request's stream: it only receives and
// dispatches; the stream type answers each phase.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		s.metrics.streamsRefused.Inc()
		return status.Errorf(codes.ResourceExhausted, "kvrouter: %d ext_proc streams are open, the most extproc.max_streams allows", cap(s.streams))
	}
	st := newStream(s, srv)
	defer st.end()
	for {
		req, err := srv.Recv()
		if err != nil {
			st.releaseBody()
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil // Envoy closed or reset the stream: a normal end
			}
			return err
		}
		done, err := st.handle(srv.Context(), req)
		if err != nil {
			// The body is left to the collector: err may refer to it.
			s.metrics.streamErrors.Inc()
			s.logger.Warn("ext_proc stream failed", "request_id", st.req.ID, "error", err)
			return status.Error(codes.Internal, err.Error())
		}
		if st.answered || done {
			st.releaseBody() // routed or refused: the body is needed no more
		}
		if done {
			return nil
		}
	}
}
