package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
)

// TestScaleFromZeroE2E: the kvrouter binary with routing.scale_from_zero_wait
// and a pods file that lists no pod, as a pool scaled to zero. A request
// for the model waits, counted in kvrouter_router_waiting_requests; once
// the pods file lists a ready pod it is routed there. With the pod gone
// again and none coming, a request gets 503 after the wait. Both waits are
// counted by result.
func TestScaleFromZeroE2E(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 1})
	sim := f.sims["sim-0"]
	dir := t.TempDir()
	podsFile, config := filepath.Join(dir, "pods.yaml"), filepath.Join(dir, "kvrouter.yaml")
	write := func(name, text string) {
		t.Helper()
		tmp := name + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, name); err != nil {
			t.Fatal(err)
		}
	}
	write(podsFile, "pods: []\n")
	write(config, "routing: {scale_from_zero_wait: 4s}\n")
	kv := startKVRouter(t, buildKVRouter(t), "--config", config, "--model", "qwen3="+qwen3Dir(t),
		"--pods-file", podsFile, "--pods-file-interval", "100ms")
	if !poll(func() bool { return kv.ready(t) }) {
		t.Fatal("kvrouter never became ready")
	}
	waiting := func() float64 { return kv.sum(t, "kvrouter_router_waiting_requests", "model=qwen3") }
	body := prompt("tides", "Why two a day?")
	type result struct {
		res *envoyclient.Result
		err error
		in  time.Duration
	}
	send := func() <-chan result {
		out := make(chan result, 1)
		go func() {
			start := time.Now()
			res, err := kv.envoy.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body)})
			out <- result{res, err, time.Since(start)}
		}()
		return out
	}

	first := send()
	if !poll(func() bool { return waiting() == 1 }) {
		t.Fatalf("kvrouter_router_waiting_requests{model=\"qwen3\"} = %v with the pool at zero, want 1", waiting())
	}
	write(podsFile, fmt.Sprintf("pods:\n- {name: sim-0, address: %s, model: qwen3, event_port: %d, replay_port: %d}\n",
		f.pods["sim-0"], port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint())))
	r := <-first
	if r.err != nil || r.res.Status != 200 || r.res.UpstreamHeaders["x-kvrouter-pod"] != "sim-0" {
		t.Fatalf("the waiting request once sim-0 is listed: %+v, %v; want routed to sim-0", r.res, r.err)
	}
	if got := kv.sum(t, "kvrouter_router_capacity_waits_total", "result=routed"); got != 1 {
		t.Errorf(`capacity_waits_total{result="routed"} = %v, want 1`, got)
	}

	write(podsFile, "pods: []\n")
	if !poll(func() bool { return len(kv.pods(t)) == 0 }) {
		t.Fatalf("pods %v still listed after the pods file emptied", kv.pods(t))
	}
	r = <-send()
	if r.err != nil || r.res.Status != 503 || r.in < 4*time.Second {
		t.Fatalf("with no pod coming: %+v, %v after %v; want 503 after the 4 s wait", r.res, r.err, r.in)
	}
	if !strings.Contains(string(r.res.ClientBody), "qwen3") {
		t.Errorf("the 503's body %q does not name the model", r.res.ClientBody)
	}
	if got := kv.sum(t, "kvrouter_router_capacity_waits_total", "result=timeout"); got != 1 {
		t.Errorf(`capacity_waits_total{result="timeout"} = %v, want 1`, got)
	}
	if got := waiting(); got != 0 {
		t.Errorf("kvrouter_router_waiting_requests{model=\"qwen3\"} = %v after the waits, want 0", got)
	}
}
