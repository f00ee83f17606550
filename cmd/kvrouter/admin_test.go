package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kubeauth"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// testApp is the app of config c, validated.
func testApp(t *testing.T, c config) (*app, settings) {
	t.Helper()
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(s, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return a, s
}

// TestDebugPodsMetricsState: /debug/pods tells a pod whose figures are
// fresh from one whose metrics never answered or went stale.
func TestDebugPodsMetricsState(t *testing.T) {
	c := defaultConfig()
	c.Routing.StaleMetricsAfter = 10 * time.Second
	a, _ := testApp(t, c)
	now := time.Now()
	for i, name := range []string{"fresh", "never", "pending", "stale"} {
		a.fleet.Upsert(pod.Pod{Name: name, IP: "10.0.0.1", Port: 8000 + i, Model: "m", Ready: true})
	}
	a.fleet.Load("fresh").ScrapedAt.Store(now.Add(-time.Second).UnixNano())
	a.fleet.Load("never").FailingSince.Store(now.Add(-time.Second).UnixNano())
	a.fleet.Load("stale").ScrapedAt.Store(now.Add(-time.Minute).UnixNano())
	a.fleet.Load("stale").FailingSince.Store(now.Add(-time.Minute + time.Second).UnixNano())

	rec := httptest.NewRecorder()
	a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pods", nil))
	var got []struct {
		Name         string     `json:"name"`
		Metrics      string     `json:"metrics"`
		ScrapedAt    *time.Time `json:"metrics_scraped_at"`
		FailingSince *time.Time `json:"metrics_failing_since"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/debug/pods: %v: %s", err, rec.Body)
	}
	want := map[string]string{"fresh": "ok", "never": "never", "pending": "pending", "stale": "stale"}
	for _, p := range got {
		if p.Metrics != want[p.Name] {
			t.Errorf("/debug/pods %s: metrics %q, want %q", p.Name, p.Metrics, want[p.Name])
		}
		if (p.ScrapedAt != nil) != (p.Name == "fresh" || p.Name == "stale") {
			t.Errorf("/debug/pods %s: metrics_scraped_at %v", p.Name, p.ScrapedAt)
		}
		if (p.FailingSince != nil) != (p.Name == "never" || p.Name == "stale") {
			t.Errorf("/debug/pods %s: metrics_failing_since %v", p.Name, p.FailingSince)
		}
	}
	if len(got) != 4 {
		t.Errorf("/debug/pods = %d pods, want 4", len(got))
	}
	if p := got[0]; p.ScrapedAt == nil || !p.ScrapedAt.Equal(now.Add(-time.Second)) {
		t.Errorf("/debug/pods fresh: metrics_scraped_at %v, want %v", p.ScrapedAt, now.Add(-time.Second))
	}
}

// TestDebugPodsTopology: /debug/pods names a candidate's data-parallel
// rank and a pod's prefill/decode role, and only where there is one.
func TestDebugPodsTopology(t *testing.T) {
	a, _ := testApp(t, defaultConfig())
	sink := newFleetSink(a.fleet, a.events, a.logger)
	sink.Upsert(pod.Pod{Name: "dp", IP: "10.0.0.1", Port: 8000, Model: "m", DPSize: 2, Ready: true})
	sink.Upsert(pod.Pod{Name: "p", IP: "10.0.0.2", Port: 8000, Model: "m", Role: pod.RolePrefill, Ready: true})
	sink.Upsert(pod.Pod{Name: "plain", IP: "10.0.0.3", Port: 8000, Model: "m", Ready: true})
	rec := httptest.NewRecorder()
	a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pods", nil))
	var got []map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/debug/pods: %v: %s", err, rec.Body)
	}
	want := map[string]string{"dp": "rank 0", "dp:rank-1": "rank 1", "p": "role prefill", "plain": ""}
	for _, p := range got {
		name, _ := p["name"].(string)
		desc := ""
		if r, ok := p["dp_rank"].(float64); ok {
			desc = fmt.Sprintf("rank %v", r)
		}
		if r, ok := p["role"].(string); ok {
			desc += "role " + r
		}
		if desc != want[name] {
			t.Errorf("/debug/pods %s: %q, want %q", name, desc, want[name])
		}
		delete(want, name)
	}
	if len(want) != 0 {
		t.Errorf("/debug/pods lacks %v", want)
	}
}

// TestDebugPodsSpeed: /debug/pods shows each pod's prefill speed: the
// configured one until its metrics teach another, and the seconds it
// learned from; the blocks its requests in flight speculated; their
// prompts' tokens and its KV cache's; what its homes may fill.
func TestDebugPodsSpeed(t *testing.T) {
	c := defaultConfig()
	c.Routing.PrefillTokensPerSecond = 20000
	a, _ := testApp(t, c)
	a.fleet.Upsert(pod.Pod{Name: "fast", IP: "10.0.0.1", Port: 8000, Model: "m", Ready: true})
	a.fleet.Upsert(pod.Pod{Name: "slow", IP: "10.0.0.2", Port: 8000, Model: "m", Ready: true})
	// 99.5 s at 5,000 tokens/s, with the prior's 0.5 s at 20,000: 5,075 tokens/s at no context.
	a.fleet.Load("slow").SetSpeed(&fleet.Speed{Busy: 99.5, Tokens: 99.5 * 5000})
	a.fleet.Load("slow").Spec.Claim(nil, []uint64{1, 2, 3}, time.Now(), time.Second, false, 0) // a request in flight
	a.fleet.Load("slow").Spec.Claim(nil, []uint64{1, 2}, time.Now(), time.Second, false, 0)    // another sharing two blocks
	a.fleet.Load("slow").Queued.Store(2500)
	a.fleet.Load("slow").KVCapacity.Store(40000)
	now := time.Now()
	a.fleet.Load("slow").ObserveCache(now, fleet.Counters{CacheQueries: 1000, CacheHits: 100, Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	a.fleet.Load("slow").ObserveCache(now.Add(time.Second), fleet.Counters{CacheQueries: 2000, CacheHits: 1000, Has: fleet.HasCacheQueries | fleet.HasCacheHits})
	rec := httptest.NewRecorder()
	a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pods", nil))
	var got []struct {
		Name    string  `json:"name"`
		Speed   float64 `json:"prefill_tokens_per_second"`
		Learned float64 `json:"prefill_learned_seconds"`
		Spec    int     `json:"speculated_blocks"`
		Queued  int64   `json:"queued_prompt_tokens"`
		KV      int64   `json:"kv_cache_tokens"`
		Miss    float64 `json:"prefix_cache_miss_share"`
		Homed   *int64  `json:"homed_tokens"`
		Fill    int64   `json:"home_fill_tokens"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/debug/pods: %v: %s", err, rec.Body)
	}
	want := map[string][2]float64{"fast": {20000, 0}, "slow": {(0.5*20000 + 99.5*5000) / 100.0, 99.5}}
	for _, p := range got {
		if w := want[p.Name]; math.Abs(p.Speed-w[0]) > 1e-6*w[0] || p.Learned != w[1] {
			t.Errorf("/debug/pods %s: %.1f tokens/s from %g s, want %.1f from %g", p.Name, p.Speed, p.Learned, w[0], w[1])
		}
		if want := map[string]int{"fast": 0, "slow": 3}[p.Name]; p.Spec != want {
			t.Errorf("/debug/pods %s: %d speculated blocks, want %d", p.Name, p.Spec, want)
		}
		if want := map[string][2]int64{"slow": {2500, 40000}}[p.Name]; p.Queued != want[0] || p.KV != want[1] {
			t.Errorf("/debug/pods %s: %d prompt tokens queued, a cache of %d, want %d and %d", p.Name, p.Queued, p.KV, want[0], want[1])
		}
		if want := map[string]int64{"slow": 32000}[p.Name]; p.Homed == nil || *p.Homed != 0 || p.Fill != want {
			t.Errorf("/debug/pods %s: homed tokens %v of %d, want 0 of %d (80%% of its cache)", p.Name, p.Homed, p.Fill, want)
		}
		if want := map[string]float64{"fast": 1, "slow": 0.1}[p.Name]; math.Abs(p.Miss-want) > 1e-9 {
			t.Errorf("/debug/pods %s: prefix cache miss share %.3f, want %.3f", p.Name, p.Miss, want)
		}
	}
	if len(got) != 2 {
		t.Errorf("/debug/pods = %d pods, want 2", len(got))
	}
}

// TestAdminLimit: with admin.max_concurrent requests in flight, one more
// gets 429 with Retry-After and is counted; once one ends, the next is
// served.
func TestAdminLimit(t *testing.T) {
	a := &app{adminSlots: make(chan struct{}, 1), adminShed: prometheus.NewCounter(prometheus.CounterOpts{Name: "shed"})}
	entered, release := make(chan struct{}), make(chan struct{})
	h := a.adminLimit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		_, _ = w.Write([]byte("ok"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "/slow")
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a request over the bound = %s (Retry-After %q), want 429 with Retry-After 1", resp.Status, resp.Header.Get("Retry-After"))
	}
	if got := testutil.ToFloat64(a.adminShed); got != 1 {
		t.Errorf("shed = %v, want 1", got)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("the request in flight = %d, want 200", code)
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a request after the bound freed = %s, want 200", resp.Status)
	}
}

// TestAdminEndpointsGuarded: with admin.auth on, every endpoint beyond the
// probes refuses a request without a token (401) or whose user may not use
// it (403), and serves one whose user may; the probes stay open. The API
// server is client-go's fake, answering reviews: token "good" is user
// "reader", who may; "other" is user "someone", who may not.
func TestAdminEndpointsGuarded(t *testing.T) {
	c := defaultConfig()
	a, _ := testApp(t, c)
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		switch tr.Spec.Token {
		case "good":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "reader"}}
		case "other":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "someone"}}
		}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.User == "reader"
		return true, sar, nil
	})
	var err error
	if a.auth, err = kubeauth.New(client, slog.New(slog.DiscardHandler), nil); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.adminHandler())
	defer srv.Close()
	do := func(method, path, token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(`{"model":"m","prompt":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, e := range []struct{ method, path string }{
		{"GET", "/metrics"},
		{"GET", "/debug/pprof/"},
		{"GET", "/debug/pprof/cmdline"},
		{"GET", "/debug/pods"},
		{"GET", "/debug/tokenizers"},
		{"POST", "/v1/score"},
	} {
		if got := do(e.method, e.path, ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without a token = %d, want 401", e.method, e.path, got)
		}
		if got := do(e.method, e.path, "other"); got != http.StatusForbidden {
			t.Errorf("%s %s as a user without the permission = %d, want 403", e.method, e.path, got)
		}
		if got := do(e.method, e.path, "good"); got == http.StatusUnauthorized || got == http.StatusForbidden {
			t.Errorf("%s %s as a user with the permission = %d, want it served", e.method, e.path, got)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := do("GET", path, ""); got == http.StatusUnauthorized || got == http.StatusForbidden {
			t.Errorf("GET %s without a token = %d, want the probe open", path, got)
		}
	}
}
