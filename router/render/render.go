// Package render asks vLLM's render endpoints for a request's prompt token
// ids: POST /v1/chat/completions/render, /v1/completions/render (and, where
// vLLM serves them, /v1/messages/render and /v1/responses/render) take the
// request body as the endpoint without /render would and answer what vLLM
// would compute, the token ids and, for multimodal requests, the items'
// hashes and placeholder ranges, without generating anything. They are
// served by `vllm launch render MODEL` (no GPU) and by `vllm serve` with
// its scale-out endpoints on.
//
// A Client bounds the calls in flight, times each out, keeps a circuit
// breaker per endpoint, moves on to the next endpoint given when one
// fails, and reuses the answer to a body it rendered moments ago.
package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Config bounds a Client's calls.
type Config struct {
	// Timeout bounds one call for a request without media, well under a
	// decision's budget. Default 30ms.
	Timeout time.Duration
	// MediaTimeout bounds one call for a request with media items, which
	// the endpoint fetches and processes. Default 1s.
	MediaTimeout time.Duration
	// MaxInFlight bounds the calls in flight; one more fails at once
	// (ErrBusy) rather than wait. Default 64.
	MaxInFlight int
	// Failures in a row open an endpoint's breaker: it is not called for
	// Cooldown, then called once to see. Defaults 3 and 10s.
	Failures int
	Cooldown time.Duration
	// Reuse is how long the answer to a body is reused for the same body
	// (a client's retry, a fallback): default 2s; 0 turns it off.
	Reuse time.Duration
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{Timeout: 30 * time.Millisecond, MediaTimeout: time.Second, MaxInFlight: 64, Failures: 3, Cooldown: 10 * time.Second, Reuse: 2 * time.Second}
}

// Result is a rendered prompt: its token ids and multimodal items (by
// offset, their placeholder ranges in the ids).
type Result struct {
	IDs []uint32
	MM  []blockhash.MMItem
}

// The errors of Render besides an endpoint's own (*StatusError).
var (
	// ErrBusy: MaxInFlight calls are in flight.
	ErrBusy = errors.New("render: too many calls in flight")
	// ErrOpen: every endpoint's breaker is open.
	ErrOpen = errors.New("render: every endpoint is failing (circuit open)")
	// ErrNotServed: the endpoint does not serve the render path (404 from
	// the server, not from vLLM's handler).
	ErrNotServed = errors.New("render: the endpoint does not serve the render path")
	// ErrMalformed: the answer is not a render result.
	ErrMalformed = errors.New("render: malformed answer")
)

// StatusError is an endpoint's error answer to the body: vLLM refused to
// render it (a 4xx) or failed (a 5xx).
type StatusError struct {
	Endpoint string
	Code     int
	Message  string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("render: %s answered %d: %s", e.Endpoint, e.Code, e.Message)
}

// Client calls render endpoints. It is safe for concurrent use.
type Client struct {
	cfg      Config
	http     *http.Client
	sem      chan struct{}
	seed     maphash.Seed
	mu       sync.Mutex
	breakers map[breakerKey]*breaker
	reused   reuseCache
	now      func() time.Time
	// Observe, when set, is told each call's endpoint, outcome (Outcome)
	// and duration.
	Observe func(endpoint, outcome string, took time.Duration)
}

// New returns a Client; transport nil gives one of its own, keeping
// connections to each endpoint open for reuse.
func New(cfg Config, transport http.RoundTripper) *Client {
	if transport == nil {
		transport = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: max(cfg.MaxInFlight, 2),
			IdleConnTimeout:     90 * time.Second,
		}
	}
	return &Client{
		cfg: cfg, http: &http.Client{Transport: transport}, sem: make(chan struct{}, max(cfg.MaxInFlight, 1)),
		seed: maphash.MakeSeed(), breakers: map[breakerKey]*breaker{}, now: time.Now,
		reused: reuseCache{m: map[uint64]*reuseEntry{}},
	}
}

// Outcomes of a call, as Observe and the metrics name them.
const (
	OutcomeOK        = "ok"
	OutcomeReused    = "reused"
	OutcomeRefused   = "refused" // a 4xx: the body, not the endpoint
	OutcomeError     = "error"   // a 5xx, a failed connection, a malformed answer
	OutcomeTimeout   = "timeout"
	OutcomeBusy      = "busy"
	OutcomeOpen      = "open"
	OutcomeNotServed = "not_served"
)

// Outcomes are every outcome.
var Outcomes = []string{OutcomeOK, OutcomeReused, OutcomeRefused, OutcomeError, OutcomeTimeout, OutcomeBusy, OutcomeOpen, OutcomeNotServed}

// Path is the render endpoint of a request path: the path with
// /render appended.
func Path(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return strings.TrimSuffix(path, "/") + "/render"
}

// Render asks the endpoints (base URLs, "http://host:port", or a pod's
// "host:port"), the first whose breaker lets it first, to render body for
// the request path; on a failure of the endpoint's (not a 4xx) the next
// is asked, twice at most. media selects MediaTimeout. The ids are
// appended to dst.
func (c *Client) Render(ctx context.Context, dst []uint32, endpoints []string, path string, body []byte, media bool) ([]uint32, []blockhash.MMItem, error) {
	var key uint64
	if c.cfg.Reuse > 0 {
		key = c.key(path, body)
		if r, ok := c.reused.get(key, c.now()); ok {
			c.observe("", OutcomeReused, 0)
			return append(dst, r.IDs...), r.MM, nil
		}
	}
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	default:
		c.observe("", OutcomeBusy, 0)
		return dst, nil, ErrBusy
	}
	timeout := c.cfg.Timeout
	if media {
		timeout = c.cfg.MediaTimeout
	}
	rp := Path(path)
	err := ErrOpen
	tries := 0
	for _, ep := range endpoints {
		if tries == 2 {
			break
		}
		b, ok := c.admit(ep, rp, c.now())
		if !ok {
			continue
		}
		tries++
		var r Result
		t0 := time.Now()
		r, err = c.call(ctx, ep, rp, body, timeout, dst)
		outcome := outcomeOf(err)
		c.observe(ep, outcome, time.Since(t0))
		c.recorded(b, c.now(), outcome)
		switch outcome {
		case OutcomeOK:
			if c.cfg.Reuse > 0 {
				c.reused.put(key, Result{IDs: append([]uint32(nil), r.IDs[len(dst):]...), MM: r.MM}, c.now().Add(c.cfg.Reuse))
			}
			return r.IDs, r.MM, nil
		case OutcomeRefused:
			return dst, nil, err // another endpoint refuses it too
		}
		if ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, ErrOpen) {
		c.observe("", OutcomeOpen, 0)
	}
	return dst, nil, err
}

func (c *Client) observe(ep, outcome string, took time.Duration) {
	if c.Observe != nil {
		c.Observe(ep, outcome, took)
	}
}

func outcomeOf(err error) string {
	var se *StatusError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrNotServed):
		return OutcomeNotServed
	case errors.As(err, &se) && se.Code < 500:
		return OutcomeRefused
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	}
	return OutcomeError
}

func (c *Client) key(path string, body []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	_, _ = h.WriteString(path)
	_ = h.WriteByte(0)
	_, _ = h.Write(body)
	return h.Sum64()
}

// call renders once on ep, at its render path rp.
func (c *Client) call(ctx context.Context, ep, rp string, body []byte, timeout time.Duration, dst []uint32) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := strings.TrimSuffix(ep, "/") + rp
	if !strings.Contains(ep, "://") {
		url = "http://" + url
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("render: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("render: %s: %w", ep, context.DeadlineExceeded)
		}
		return Result{}, fmt.Errorf("render: %s: %w", ep, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("render: %s: %w", ep, context.DeadlineExceeded)
		}
		return Result{}, fmt.Errorf("render: %s: reading the answer: %w", ep, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, statusError(ep, resp.StatusCode, data)
	}
	r, err := Decode(dst, data)
	if err != nil {
		return Result{}, fmt.Errorf("render: %s: %w", ep, err)
	}
	return r, nil
}
