package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/kvlog"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// announced reads serve's JSON log until every named server said where it
// listens, and returns their URLs by name.
func announced(t *testing.T, r io.Reader, names ...string) map[string]string {
	t.Helper()
	urls, err := kvlog.Listening(r, nil, names...)
	if err != nil {
		t.Fatal(err)
	}
	return urls
}

// TestServeStaticPods runs serve with one static pod (a fake OpenAI server)
// and the standalone proxy: requests reach the pod with routing headers,
// and the admin endpoints describe the pod and score requests.
func TestServeStaticPods(t *testing.T) {
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"served_by":"fake","path":%q}`, r.URL.Path)
	}))
	defer pod.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{
		"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--pod", "p1=" + strings.TrimPrefix(pod.URL, "http://") + ",model=m,events=1,replay=2",
	}
	go func() { done <- run(ctx, args, io.Discard, pw); _ = pw.Close() }()
	urls := announced(t, pr, "admin server", "OpenAI proxy", "ext_proc gRPC server")

	resp, err := http.Post(urls["OpenAI proxy"]+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Kvrouter-Pod") != "p1" || resp.Header.Get("X-Kvrouter-Reason") != "no-tokenizer" || !strings.Contains(string(body), "fake") {
		t.Fatalf("proxied = %d %v %s, want 200 from p1 routed by load (no tokenizer)", resp.StatusCode, resp.Header, body)
	}

	// The events manager subscribes to the pod on its own schedule: the
	// pod may be listed before its subscriber is.
	var pods []map[string]any
	var ev []any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // a hang guard, not a performance bound
		getJSON(t, urls["admin server"]+"/debug/pods", &pods)
		if len(pods) != 1 || pods[0]["name"] != "p1" || pods[0]["model"] != "m" {
			t.Fatalf("/debug/pods = %v, want p1 serving m", pods)
		}
		if ev, _ = pods[0]["events"].([]any); len(ev) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(ev) != 1 || ev[0].(map[string]any)["last_seq"] != -1.0 {
		t.Fatalf("/debug/pods events = %v, want rank 0 with nothing applied", pods[0]["events"])
	}
	if groups, ok := pods[0]["kv_cache_groups"].([]any); !ok || len(groups) != 0 {
		t.Fatalf("/debug/pods kv_cache_groups = %v, want an empty list before any event", pods[0]["kv_cache_groups"])
	}
	var toks struct {
		PerModel int64          `json:"prefix_cache_bytes_per_model"`
		Cache    map[string]any `json:"prefix_cache"`
	}
	getJSON(t, urls["admin server"]+"/debug/tokenizers", &toks)
	if toks.PerModel != tokenizer.DefaultPrefixCacheBytes || toks.Cache["budget_bytes"] == nil || toks.Cache["hits"] == nil {
		t.Fatalf("/debug/tokenizers = %+v, want each model's prefix cache budget (%d) and the caches' figures", toks, tokenizer.DefaultPrefixCacheBytes)
	}
	resp, err = http.Post(urls["admin server"]+"/v1/score", "application/json", strings.NewReader(`{"model":"m","prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Reason string
		Pods   []struct{ Name string } `json:"pods"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rep)
	_ = resp.Body.Close()
	if err != nil || rep.Reason != "no-tokenizer" || len(rep.Pods) != 1 || rep.Pods[0].Name != "p1" {
		t.Fatalf("/v1/score = %+v, %v, want p1 scored", rep, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve = %v", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a performance bound
		t.Fatal("serve did not stop")
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func TestServeConfigErrors(t *testing.T) {
	var stderr strings.Builder
	err := run(context.Background(), []string{"serve", "--pod", "nope", "--hash-algo", "md5", "--block-size", "0", "--model", "x"}, io.Discard, &stderr)
	for _, want := range []string{`pod "nope"`, "md5", "block size", `model "x"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve with bad flags = %v, want every problem listed, including %q", err, want)
		}
	}
}
