package kvevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// vLLM announces where each data-parallel rank publishes its KV events:
// GET /kv_event_sources on its API server (vllm/entrypoints/serve/
// kv_events/api_router.py, vllm-project/vllm #55844) answers each rank's
// resolved KVEventsConfig, its endpoints bound (an ephemeral port, set as
// port 0, resolved to the port the publisher got). Its answer has been
// seen in three shapes, all read here:
//
//	{"0": {"endpoint": ..., "replay_endpoint": ..., "topic": ..., "publisher": "zmq", ...}, "1": ...}
//	{"sources": [{"data_parallel_rank": 0, "endpoint": ..., "replay_endpoint": ..., "topic": ...}, ...]}
//	[{"data_parallel_rank": 0, ...}, ...]
//
// An endpoint bound to every interface (tcp://*:p, tcp://0.0.0.0:p,
// tcp://[::]:p) or to loopback is reached on the pod's own address. A
// stream follows the entry of its rank; an answer of one entry is followed
// whatever rank it names (an API server of one data-parallel rank, as each
// target port of an InferencePool's pod is).

// Sources modes (Config.Sources).
const (
	// SourcesAuto asks the pods whose event ports nothing configured.
	SourcesAuto = "auto"
	// SourcesAlways asks every pod, whatever its configured ports.
	SourcesAlways = "always"
	// SourcesOff never asks: ports come from the pod's configuration or
	// the defaults.
	SourcesOff = "off"
)

// The results of looking a rank's endpoints up, for event_sources_total.
const (
	sourceDiscovered = iota
	sourceAbsent
	sourceFailed
	sourceRefused
	sourcePorts
	numSourceResults
)

var sourceResults = [numSourceResults]string{"discovered", "absent", "failed", "refused", "ports"}

// maxSourcesBody bounds the answer read: a handful of ranks is a few
// hundred bytes.
const maxSourcesBody = 1 << 20

// Source is where one rank of a pod publishes, as kvrouter follows it.
type Source struct {
	// From says how it was found: "kv_event_sources" (the pod's answer)
	// or "ports" (configured or default ports).
	From string `json:"from"`
	// Endpoint is the PUB socket's address; Replay the replay ROUTER's, ""
	// when the pod serves none (replays are then not asked for).
	Endpoint string `json:"endpoint"`
	Replay   string `json:"replay_endpoint,omitempty"`
	// Topic is the topic subscribed to.
	Topic string `json:"topic"`
	// Refused says why the pod's answer cannot be used; nothing is then
	// followed until the pod answers otherwise.
	Refused string `json:"refused,omitempty"`
}

// rawSource is one rank's entry in the answer.
type rawSource struct {
	Rank      *int    `json:"data_parallel_rank"`
	Endpoint  *string `json:"endpoint"`
	Replay    *string `json:"replay_endpoint"`
	Topic     *string `json:"topic"`
	Publisher *string `json:"publisher"`
	Encoding  *string `json:"encoding"`
}

// errNoSources is an answer that says the pod serves no such route (an
// older vLLM): its ports are then the configured or default ones.
var errNoSources = errors.New("the pod does not serve /kv_event_sources")

// parseSources reads the answer's entries by rank.
func parseSources(body []byte) (map[int]rawSource, error) {
	body = []byte(strings.TrimSpace(string(body)))
	var list []rawSource
	switch {
	case len(body) > 0 && body[0] == '[':
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("read the answer: %w", err)
		}
	default:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, fmt.Errorf("read the answer: %w", err)
		}
		if s, ok := obj["sources"]; ok {
			if err := json.Unmarshal(s, &list); err != nil {
				return nil, fmt.Errorf("read the answer's sources: %w", err)
			}
			break
		}
		out := make(map[int]rawSource, len(obj))
		for k, v := range obj {
			rank, err := strconv.Atoi(k)
			if err != nil || rank < 0 {
				return nil, fmt.Errorf("the answer's key %q is not a data-parallel rank", k)
			}
			var r rawSource
			if err := json.Unmarshal(v, &r); err != nil {
				return nil, fmt.Errorf("read rank %d: %w", rank, err)
			}
			out[rank] = r
		}
		return out, nil
	}
	out := make(map[int]rawSource, len(list))
	for i, r := range list {
		rank := i
		if r.Rank != nil {
			rank = *r.Rank
		}
		if _, dup := out[rank]; dup || rank < 0 {
			return nil, fmt.Errorf("the answer names rank %d twice or out of range", rank)
		}
		out[rank] = r
	}
	return out, nil
}

// resolveSource turns rank's entry into what kvrouter connects to, on the
// pod's address host; an entry it cannot use is an error that says why.
func resolveSource(sources map[int]rawSource, rank int, host string) (Source, error) {
	r, ok := sources[rank]
	if !ok && len(sources) == 1 {
		for _, only := range sources { // one engine behind the API server: its own rank
			r, ok = only, true
		}
	}
	if !ok {
		ranks := make([]int, 0, len(sources))
		for k := range sources {
			ranks = append(ranks, k)
		}
		sort.Ints(ranks)
		return Source{}, fmt.Errorf("no entry for data-parallel rank %d (the answer has %v)", rank, ranks)
	}
	if r.Publisher != nil && *r.Publisher != "zmq" {
		return Source{}, fmt.Errorf("rank %d's publisher is %q, kvrouter follows zmq", rank, *r.Publisher)
	}
	if r.Encoding != nil && *r.Encoding != "" && *r.Encoding != "msgpack" {
		return Source{}, fmt.Errorf("rank %d's encoding is %q, kvrouter reads msgpack", rank, *r.Encoding)
	}
	if r.Endpoint == nil || *r.Endpoint == "" {
		return Source{}, fmt.Errorf("rank %d has no endpoint", rank)
	}
	s := Source{From: "kv_event_sources"}
	var err error
	if s.Endpoint, err = reachable(*r.Endpoint, host); err != nil {
		return Source{}, fmt.Errorf("rank %d's endpoint: %w", rank, err)
	}
	if r.Replay != nil && *r.Replay != "" {
		if s.Replay, err = reachable(*r.Replay, host); err != nil {
			return Source{}, fmt.Errorf("rank %d's replay endpoint: %w", rank, err)
		}
	}
	if r.Topic != nil {
		s.Topic = *r.Topic
	}
	return s, nil
}

// reachable is endpoint as kvrouter connects to it: tcp only, a wildcard
// or loopback host replaced by host.
func reachable(endpoint, host string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("%q is not a tcp:// endpoint", endpoint)
	}
	h, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("%q: %w", endpoint, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q has no bound port", endpoint)
	}
	if ip := net.ParseIP(h); h == "*" || h == "" || h == "localhost" || (ip != nil && (ip.IsUnspecified() || ip.IsLoopback())) {
		h = host
	}
	return "tcp://" + net.JoinHostPort(h, port), nil
}

// locate finds where the stream's rank publishes: the pod's answer when it
// is asked (Config.Sources), else, or when it serves no answer, the
// configured or default ports. An answer kvrouter cannot use is an error:
// nothing is followed until the next connection asks again.
func (st *stream) locate(ctx context.Context) error {
	ports := Source{
		From:     "ports",
		Endpoint: st.endpoint(st.port(st.pod.EventPort, st.cfg.EventPort)),
		Replay:   st.endpoint(st.port(st.pod.ReplayPort, st.cfg.ReplayPort)),
		Topic:    st.cfg.Topic,
	}
	ask := st.cfg.Sources == SourcesAlways || (st.cfg.Sources == SourcesAuto && st.pod.EventPort == 0 && st.pod.ReplayPort == 0)
	src, result, err := ports, sourcePorts, error(nil)
	if ask {
		raw, ferr := sharedSources().fetch(ctx, st.pod.Endpoint())
		switch {
		case errors.Is(ferr, errNoSources):
			result = sourceAbsent
		case ferr != nil:
			result = sourceFailed
			st.log.Debug("kvevents: no event sources from the pod; using its ports", "pod", st.pod.Name, "err", ferr)
		default:
			src, err = resolveSource(raw, st.rank+st.pod.DPRank, st.pod.IP)
			result = sourceDiscovered
			if err != nil {
				src, result = Source{From: "kv_event_sources", Refused: err.Error()}, sourceRefused
				err = fmt.Errorf("kvevents: pod %s's /kv_event_sources (pods.event_sources): %w", st.pod.Name, err)
			}
		}
	}
	st.m.sources[result].Inc()
	st.src = src
	st.state.source.Store(&src)
	return err
}

// sourcesClient asks pods for their event sources; one per Manager.
type sourcesClient struct {
	http    *http.Client
	timeout time.Duration
}

// sharedSources is the client every stream asks its pod with.
var sharedSources = sync.OnceValue(func() *sourcesClient {
	return &sourcesClient{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}, timeout: sourcesTimeout}
})

// sourcesTimeout bounds one question to a pod.
const sourcesTimeout = 2 * time.Second

// fetch asks the API server at addr (host:port) for its sources.
func (c *sourcesClient) fetch(ctx context.Context, addr string) (map[int]rawSource, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := url.URL{Scheme: "http", Host: addr, Path: "/kv_event_sources"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSourcesBody))
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, errNoSources
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET /kv_event_sources: %s", resp.Status)
	case err != nil:
		return nil, fmt.Errorf("GET /kv_event_sources: %w", err)
	}
	return parseSources(body)
}
