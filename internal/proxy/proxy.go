package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httputil"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/kvrouter/kvrouter/router"
)

// Proxy is kvrouter as an OpenAI-compatible HTTP reverse proxy, for users
// without Envoy and for the local demo: it routes each request with the same
// Router and forwards it to the chosen pod, streaming the reply (SSE
// included) without buffering and canceling the upstream request when the
// client goes away. Responses carry the same x-kvrouter-* headers as behind
// Envoy.
type Proxy struct {
	router  *router.Router
	maxBody int64
	logger  *slog.Logger
	rp      *httputil.ReverseProxy
}

type decisionKey struct{}

// New returns a proxy routing with r, refusing bodies over maxBody
// bytes, and dialing pods with transport (nil: http.DefaultTransport).
func New(r *router.Router, maxBody int64, transport http.RoundTripper, logger *slog.Logger) *Proxy {
	p := &Proxy{router: r, maxBody: maxBody, logger: logger}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			d, _ := pr.In.Context().Value(decisionKey{}).(*router.Decision)
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", d.Address, ""
			pr.SetXForwarded()
			setRoutingHeaders(pr.Out.Header, d)
			if rank, ok := d.RankHeader(); ok {
				pr.Out.Header.Set(router.HeaderDPRank, rank)
			}
			if name, value, ok := d.PrefillHeader(); ok {
				pr.Out.Header.Set(name, value)
			}
			if parent, state := d.TraceHeaders(); parent != "" {
				pr.Out.Header.Set("Traceparent", parent)
				if state != "" {
					pr.Out.Header.Set("Tracestate", state)
				}
			}
		},
		Transport:     transport,
		FlushInterval: -1, // flush every write: SSE streams through unbuffered
		ModifyResponse: func(resp *http.Response) error {
			d, _ := resp.Request.Context().Value(decisionKey{}).(*router.Decision)
			d.Prefilled()
			setRoutingHeaders(resp.Header, d)
			if d.LearnsResponseID() && resp.StatusCode < 300 {
				resp.Body = &responseIDBody{ReadCloser: resp.Body, d: d}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client left
			}
			d, _ := req.Context().Value(decisionKey{}).(*router.Decision)
			p.logger.Warn("pod unreachable", "request_id", d.RequestID, "pod", d.Pod, "error", err)
			writeError(w, req.URL.Path, &router.Error{Status: http.StatusBadGateway, Type: "upstream_error", Message: "pod " + d.Pod + " did not answer"})
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return p
}

func setRoutingHeaders(h http.Header, d *router.Decision) {
	var buf [4][2]string
	for _, kv := range d.AppendHeaders(buf[:0]) {
		h.Set(kv[0], kv[1])
	}
}

// ServeHTTP routes and forwards one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, p.maxBody))
	if err != nil {
		e := &router.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "reading the request body: " + err.Error()}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			e = router.TooLarge(int(p.maxBody))
		}
		p.router.Refused(requestID(req), req.URL.Path, "", e)
		writeError(w, req.URL.Path, e)
		return
	}
	id := requestID(req)
	ctx := req.Context()
	if req.Header.Get("Traceparent") != "" {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	d, err := p.router.Route(ctx, router.Request{ID: id, Path: req.URL.Path, Body: body, Objective: req.Header.Get(router.HeaderObjective)})
	if err != nil {
		e := router.AsError(err)
		if e == nil {
			p.logger.Error("routing failed", "request_id", id, "path", req.URL.Path, "error", err)
			e = &router.Error{Status: http.StatusInternalServerError, Type: "internal_error", Message: err.Error()}
		}
		writeError(w, req.URL.Path, e)
		return
	}
	defer d.Done()
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	p.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), decisionKey{}, d)))
}

// requestID is the request's X-Request-Id, given one first when it has none,
// as Envoy does.
func requestID(req *http.Request) string {
	id := req.Header.Get("X-Request-Id")
	if id == "" {
		id = newRequestID()
		req.Header.Set("X-Request-Id", id)
	}
	return id
}

// writeError answers with a JSON error in the shape of the API of path.
func writeError(w http.ResponseWriter, path string, e *router.Error) {
	w.Header().Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body(path))
}

// newRequestID returns a random 128-bit id in hex, as Envoy generates for
// requests without one.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// responseIDBody passes a Responses API reply through unchanged, reading
// the response id from its first bytes (router.ResponseIDReader) for the
// decision to learn.
type responseIDBody struct {
	io.ReadCloser
	d  *router.Decision
	rd router.ResponseIDReader
}

func (b *responseIDBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if id := b.rd.Feed(p[:n]); id != "" {
		b.d.ResponseID(id)
	}
	return n, err
}
