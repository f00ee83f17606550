package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router/fleet"
)

func TestResolveKubeconfig(t *testing.T) {
	tests := []struct{ flag, env, host, want string }{
		{"", "", "", ""},
		{"", "", "10.0.0.1", discovery.InCluster},
		{"off", "/e.yaml", "10.0.0.1", ""},
		{"/k.yaml", "/e.yaml", "", "/k.yaml"},
		{"in-cluster", "", "", discovery.InCluster},
		{"", "/e.yaml:/f.yaml", "10.0.0.1", "/e.yaml:/f.yaml"}, // $KUBECONFIG, as kubectl reads it
	}
	for _, tt := range tests {
		if got := discovery.Kubeconfig(tt.flag, tt.env, tt.host); got != tt.want {
			t.Errorf("discovery.Kubeconfig(%q, %q, %q) = %q, want %q", tt.flag, tt.env, tt.host, got, tt.want)
		}
	}
}

// testSink is serve's pod sink over a new index, fleet and event manager
// (not running).
func testSink(t *testing.T) (*fleetSink, *fleet.Fleet) {
	t.Helper()
	idx, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	events, err := kvevents.NewManager(kvevents.DefaultConfig(), idx, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	fl := fleet.New(idx)
	return newFleetSink(fl, events, log), fl
}

// TestFleetSink checks that discovery's reports reach the fleet: routed
// while ready, kept but excluded while not, gone when removed.
func TestFleetSink(t *testing.T) {
	s, fleet := testSink(t)
	p := pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "m", LoRAs: []string{"l"}, EventPort: 5557, ReplayPort: 5558, Ready: true}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"ready", func() { s.Upsert(p) }, "llm/a 10.0.0.1:8000 m [l] ready=true"},
		{"not ready", func() { q := p; q.Ready = false; s.Upsert(q) }, "llm/a 10.0.0.1:8000 m [l] ready=false"},
		{"removed", func() { s.Remove("llm/a") }, ""},
	}
	for _, st := range steps {
		st.do()
		var got []string
		for _, q := range fleet.Pods() {
			got = append(got, fmt.Sprintf("%s %s %s %v ready=%v", q.Name, q.Endpoint(), q.Model, q.LoRAs, q.Ready))
		}
		if strings.Join(got, ";") != st.want {
			t.Errorf("%s: fleet = %q, want %q", st.name, got, st.want)
		}
	}
}

// TestFleetSinkRanks checks that a pod of several data-parallel ranks
// enters the fleet as one candidate per rank, on its own event ports, and
// that fewer ranks, or the pod's removal, take the others out.
func TestFleetSinkRanks(t *testing.T) {
	s, fleet := testSink(t)
	p := pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "m", EventPort: 5557, DPSize: 3, Ready: true}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"three ranks", func() { s.Upsert(p) }, "llm/a 10.0.0.1:8000 rank 0/3 events 5557;llm/a:rank-1 10.0.0.1:8000 rank 1/3 events 5558;llm/a:rank-2 10.0.0.1:8000 rank 2/3 events 5559"},
		{"two ranks", func() { q := p; q.DPSize = 2; s.Upsert(q) }, "llm/a 10.0.0.1:8000 rank 0/2 events 5557;llm/a:rank-1 10.0.0.1:8000 rank 1/2 events 5558"},
		{"one rank", func() { q := p; q.DPSize = 1; s.Upsert(q) }, "llm/a 10.0.0.1:8000 rank 0/0 events 5557"},
		{"three again", func() { s.Upsert(p) }, "llm/a 10.0.0.1:8000 rank 0/3 events 5557;llm/a:rank-1 10.0.0.1:8000 rank 1/3 events 5558;llm/a:rank-2 10.0.0.1:8000 rank 2/3 events 5559"},
		{"removed", func() { s.Remove("llm/a") }, ""},
	}
	for _, st := range steps {
		st.do()
		var got []string
		for _, q := range fleet.Pods() {
			got = append(got, fmt.Sprintf("%s %s rank %d/%d events %d", q.Name, q.Endpoint(), q.DPRank, q.DPRanks, q.EventPort))
		}
		slices.Sort(got)
		if strings.Join(got, ";") != st.want {
			t.Errorf("%s: fleet = %q, want %q", st.name, got, st.want)
		}
	}
}

// fakeAPIServer answers a pod informer: the list waits for release, the
// watch stays open without events, and watch-list requests are refused so
// the informer falls back to list and watch.
func fakeAPIServer(t *testing.T, release <-chan struct{}, podJSON string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path != "/api/v1/pods" || q.Get("labelSelector") != "kvrouter.io/pool=default":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		case q.Get("watch") == "true" && q.Has("sendInitialEvents"):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`)
		case q.Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[%s]}`, podJSON)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: test, user: {token: test}}]
contexts: [{name: fake, context: {cluster: fake, user: test}}]
current-context: fake
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeDiscovery runs serve against a fake API server: not ready until
// the pod list arrived, then ready with the discovered pod in the fleet.
func TestServeDiscovery(t *testing.T) {
	release := make(chan struct{})
	pod := `{"metadata":{"name":"vllm-0","namespace":"llm","labels":{"kvrouter.io/pool":"default"},
		"annotations":{"kvrouter.io/model":"Qwen/Qwen3-0.6B","kvrouter.io/lora-adapters":"sql"}},
		"status":{"phase":"Running","podIP":"10.255.255.1","conditions":[{"type":"Ready","status":"True"}]}}`
	api := fakeAPIServer(t, release, pod)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json", "--admin-auth", "none", "--hub-offline", "--kubeconfig", writeKubeconfig(t, api.URL)}
	go func() { done <- run(ctx, args, io.Discard, pw); _ = pw.Close() }()
	base := listenURL(t, pr)
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz before the pod list = %d, want 503", code)
	}
	close(release)
	deadline := time.Now().Add(20 * time.Second) // a hang guard, not a performance bound
	for code, _ := get(t, base+"/readyz"); code != http.StatusOK; code, _ = get(t, base+"/readyz") {
		if time.Now().After(deadline) {
			t.Fatal("serve never became ready after the pod list arrived")
		}
		time.Sleep(10 * time.Millisecond) // polls an outside process's state
	}
	_, body := get(t, base+"/debug/pods")
	for _, want := range []string{`"name": "llm/vllm-0"`, `"address": "10.255.255.1:8000"`, `"model": "Qwen/Qwen3-0.6B"`, `"ready": true`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /debug/pods = %s, want it to contain %s", body, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel = %v, want nil", err)
	}
}
