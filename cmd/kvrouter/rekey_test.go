package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// TestDebugPodsRekeyed: a pod whose chains start from random bytes (vLLM
// without PYTHONHASHSEED) reads "mismatch" and "rekeyed" in /debug/pods once
// its chains have failed verification.
func TestDebugPodsRekeyed(t *testing.T) {
	a, _ := testApp(t, defaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Run() = %v, want nil", err)
			}
		}
	})
	go func() { done <- a.events.Run(ctx) }()
	sim, err := vllmsim.New(vllmsim.Config{
		Name: "sim", Model: "m", Hash: blockhash.DefaultConfig(), RandomRoot: true,
		PrefillPerToken: time.Nanosecond, DecodePerToken: time.Nanosecond, OutputTokens: 1,
		Events: vllmpub.Config{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*", BufferSteps: 64},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- sim.Run(ctx) }()
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	sink := newFleetSink(a.fleet, a.events, a.logger)
	sink.Upsert(pod.Pod{
		Name: "sim", IP: "127.0.0.1", Port: 8000, Model: "m", Ready: true,
		EventPort: endpointPort(t, sim.Publisher().Endpoint()), ReplayPort: endpointPort(t, sim.Publisher().ReplayEndpoint()),
	})

	report := func() (verification, keys string) {
		rec := httptest.NewRecorder()
		a.adminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pods", nil))
		var got []struct {
			Verification string `json:"hash_verification"`
			IndexKeys    string `json:"index_keys"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got) != 1 {
			t.Fatalf("/debug/pods = %s (%v), want one pod", rec.Body, err)
		}
		return got[0].Verification, got[0].IndexKeys
	}
	if v, k := report(); v != "unknown" || k != "pod" {
		t.Fatalf("/debug/pods before any event: %s, %s; want unknown, pod", v, k)
	}
	deadline := time.Now().Add(20 * time.Second) // real sockets: poll with a bound
	for i := 0; ; i++ {
		if v, k := report(); v == "mismatch" && k == "rekeyed" {
			break
		}
		if time.Now().After(deadline) {
			v, k := report()
			t.Fatalf("/debug/pods after %d prompts: %s, %s; want mismatch, rekeyed", i, v, k)
		}
		body := fmt.Sprintf(`{"model":"m","prompt":"%03d %s"}`, i, strings.Repeat("block ", 6))
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		time.Sleep(2 * time.Millisecond) // let the events arrive between prompts
	}
}

// endpointPort is the port of a ZMQ endpoint tcp://host:port.
func endpointPort(t *testing.T, endpoint string) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscanf(endpoint[strings.LastIndexByte(endpoint, ':')+1:], "%d", &p); err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return p
}
