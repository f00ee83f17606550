package main

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/router"
)

// adminHandler serves the operator endpoints: liveness, readiness,
// Prometheus metrics, the Go profiler, the pods as kvrouter sees them, and
// POST /v1/score.
func (a *app) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, why := a.readiness()
		if !ready {
			writeText(w, http.StatusServiceUnavailable, why+"\n")
			return
		}
		writeText(w, http.StatusOK, why+"\n")
	})
	// Beyond the probes, every endpoint is behind admin.auth and the bound
	// on requests at once.
	guard := a.adminLimit
	if a.auth != nil {
		guard = func(h http.Handler) http.Handler { return a.adminLimit(a.auth.Wrap(h)) }
	}
	mux.Handle("GET /metrics", guard(promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})))
	if !a.debug {
		return mux
	}
	handle := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, guard(h)) }
	handle("/debug/pprof/", pprof.Index)
	handle("/debug/pprof/cmdline", pprof.Cmdline)
	handle("/debug/pprof/profile", pprof.Profile)
	handle("/debug/pprof/symbol", pprof.Symbol)
	handle("/debug/pprof/trace", pprof.Trace)
	handle("GET /debug/pods", a.debugPods)
	handle("GET /debug/tokenizers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"prefix_cache":                 a.tokenizers.PrefixStats(),
			"prefix_cache_bytes_per_model": a.tokenizers.PrefixCacheBytes(),
			"models":                       a.router.Tokenization(),
		})
	})
	handle("POST /v1/score", a.score)
	return mux
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// podReport is one pod in /debug/pods.
type podReport struct {
	Name         string                `json:"name"`
	Address      string                `json:"address"`
	Ready        bool                  `json:"ready"`
	Model        string                `json:"model"`
	Engine       string                `json:"engine"` // vllm, sglang or trtllm
	Aliases      []string              `json:"aliases,omitempty"`
	LoRAs        []string              `json:"loras,omitempty"`
	Role         string                `json:"role,omitempty"`    // prefill or decode; none: both
	DPRank       *int                  `json:"dp_rank,omitempty"` // the data-parallel rank this candidate is, on a server of several
	Events       []kvevents.RankStatus `json:"events"`            // per DP rank: connected, last applied seq
	Entries      int                   `json:"index_entries"`
	Verification string                `json:"hash_verification"`
	IndexKeys    string                `json:"index_keys"` // pod: its own hashes; rekeyed: kvrouter's of its token ids
	// Groups are the pod's KV-cache groups its events have named (index,
	// kind, window, block size), whether the index holds each, and why it
	// cannot price one: a hybrid model's matches are the prefix every
	// group serves.
	Groups []kvevents.Group `json:"kv_cache_groups"`
	// Tokenization is how the model's requests are routed: exact, or by
	// load and why (a missing tokenizer or chat template).
	Tokenization string `json:"tokenization"`
	InFlight     int64  `json:"in_flight"`
	// Speculated is the blocks this replica's requests there, not yet
	// prefilled, speculated (fleet.SpecLedger).
	Speculated int `json:"speculated_blocks"`
	// Queued is the prompt tokens of this replica's requests there not
	// yet prefilled; MissShare the share of prompt tokens its prefix
	// cache missed lately (1 until its metrics show hits); KVCapacity the
	// tokens its KV cache holds (vllm:cache_config_info; 0: unknown).
	// Once Queued × MissShare passes KVCapacity, blocks no queued request
	// uses soon are priced as evicted (router.Score.Expiring).
	Queued       int64      `json:"queued_prompt_tokens"`
	MissShare    float64    `json:"prefix_cache_miss_share"`
	KVCapacity   int64      `json:"kv_cache_tokens"`
	Waiting      int64      `json:"vllm_waiting"`
	Running      int64      `json:"vllm_running"`
	Metrics      string     `json:"metrics"`               // ok, never, stale, pending (no scrape ended yet)
	ScrapedAt    *time.Time `json:"metrics_scraped_at"`    // the last successful scrape; null: none
	FailingSince *time.Time `json:"metrics_failing_since"` // the first of the current failures; null: none
	// PrefillSpeed is the prefill speed the pod is priced at, in tokens
	// per second at no context: learned from its metrics, or the
	// configured routing.prefill_tokens_per_second; PrefillLearned is the
	// seconds of its prefill that taught it (faded with age; 0: the
	// configured speed alone).
	PrefillSpeed   float64 `json:"prefill_tokens_per_second"`
	PrefillLearned float64 `json:"prefill_learned_seconds"`
	// HomedTokens is the footprints of the prefixes this replica homes on
	// the pod; HomeFill what they may fill (the router's Tuning.HomeFill of its KV
	// cache; 0 while unknown or with homes off).
	HomedTokens int64 `json:"homed_tokens"`
	HomeFill    int64 `json:"home_fill_tokens"`
}

func (a *app) debugPods(w http.ResponseWriter, _ *http.Request) {
	status := map[string]kvevents.PodStatus{}
	for _, s := range a.events.Status() {
		status[s.Name] = s
	}
	pods, now, parts := a.fleet.Pods(), time.Now(), a.health.States()
	out := make([]podReport, 0, len(pods))
	for _, p := range pods {
		st := status[p.Name]
		r := podReport{
			Name: p.Name, Address: p.Endpoint(), Ready: p.Ready, Model: p.Model, Aliases: p.Aliases, LoRAs: p.LoRAs,
			Events: st.Ranks, Verification: st.Verification.String(), IndexKeys: "pod", Tokenization: tokenization(parts, p.Model),
		}
		r.Role, r.Engine = string(p.Role), cmp.Or(st.Engine, p.Engine, a.defaultEngine)
		if p.DPRanks > 0 {
			r.DPRank = &p.DPRank
		}
		if st.Rekeyed {
			r.IndexKeys = "rekeyed"
		}
		if r.Events == nil {
			r.Events = []kvevents.RankStatus{}
		}
		if r.Groups = st.Groups; r.Groups == nil {
			r.Groups = []kvevents.Group{}
		}
		id, indexed := a.index.Pod(p.Name)
		if indexed {
			r.Entries = a.index.PodEntries(id)
		}
		if l := a.fleet.Load(p.Name); l != nil {
			if indexed {
				r.HomedTokens, r.HomeFill = a.router.Homed(id, l)
			}
			r.InFlight, r.Waiting, r.Running = l.InFlight.Load(), l.Waiting.Load(), l.Running.Load()
			r.Speculated = l.Spec.Speculated()
			r.Queued, r.MissShare, r.KVCapacity = l.Queued.Load(), l.MissShare(), l.KVCapacity.Load()
			r.Metrics = l.Metrics(now, a.staleAfter).String()
			r.ScrapedAt, r.FailingSince = unixTime(l.ScrapedAt.Load()), unixTime(l.FailingSince.Load())
			r.PrefillSpeed = 1 / a.router.PrefillSecondsPerToken(l)
			r.PrefillLearned = a.router.LearnedSeconds(l)
		}
		out = append(out, r)
	}
	writeJSON(w, http.StatusOK, out)
}

// unixTime is ns unix nanoseconds in UTC, or nil for 0.
func unixTime(ns int64) *time.Time {
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns).UTC()
	return &t
}

// score answers POST /v1/score: the body of a routed path scored against
// every candidate pod, without routing it. ?path= names the path (e.g.
// /v1/messages); without it the body says: input for /v1/responses,
// messages for /v1/chat/completions, else /v1/completions.
func (a *app) score(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": err.Error()})
		return
	}
	path := r.URL.Query().Get("path")
	if path == "" {
		path = "/v1/completions"
		var probe struct {
			Messages json.RawMessage `json:"messages"`
			Input    json.RawMessage `json:"input"`
		}
		if json.Unmarshal(body, &probe) == nil {
			switch {
			case probe.Input != nil:
				path = "/v1/responses"
			case probe.Messages != nil:
				path = "/v1/chat/completions"
			}
		}
	}
	rep, err := a.router.Score(router.Request{Path: path, Body: body})
	if e := router.AsError(err); e != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.Status)
		_, _ = w.Write(e.Body(path))
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// newBuildInfo is the kvrouter_build_info gauge: always 1, labeled with the
// version and the Go release that built the binary.
func newBuildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kvrouter_build_info",
		Help:        "Always 1; labels carry kvrouter's version and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// adminLimit serves at most admin.max_concurrent requests through h at once;
// one more gets 429, counted.
func (a *app) adminLimit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case a.adminSlots <- struct{}{}:
			defer func() { <-a.adminSlots }()
			h.ServeHTTP(w, r)
		default:
			a.adminShed.Inc()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many admin requests at once (admin.max_concurrent)", http.StatusTooManyRequests)
		}
	})
}
