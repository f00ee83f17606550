package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recordingSink records the calls the static pods make.
type recordingSink struct {
	mu    sync.Mutex
	calls []string
}

func (r *recordingSink) Upsert(p pod.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("upsert %s %s:%d %s %v %v %d/%d dp%d", p.Name, p.IP, p.Port, p.Model, p.Aliases, p.LoRAs, p.EventPort, p.ReplayPort, p.DPSize))
}

func (r *recordingSink) Remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "remove "+name)
}

// take returns the calls so far and forgets them.
func (r *recordingSink) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// TestStaticPodsReload drives the pods file through its life: loaded, pods
// added, changed, moved and removed; broken edits and a missing file keep
// the last good pods, are reported once each, and are counted.
func TestStaticPodsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.yaml")
	static := []pod.Pod{{Name: "flag", IP: "10.0.0.9", Port: 80, Model: "m", Ready: true}}
	sink := &recordingSink{}
	reg := prometheus.NewRegistry()
	s := newStaticPods(static, path, "dm", time.Second, sink, reg, slog.New(slog.DiscardHandler))
	steps := []struct {
		name, file string // file "-": removed
		wantErr    string
		want       []string
	}{
		{"first", "pods:\n- {name: a, address: \"10.0.0.1:8000\"}\n- {name: b, address: \"10.0.0.2:8000\", model: q, loras: [l], event_port: 6000, replay_port: 6001, dp_size: 2}\n", "", []string{
			"upsert a 10.0.0.1:8000 dm [] [] 0/0 dp0", "upsert b 10.0.0.2:8000 q [] [l] 6000/6001 dp2", "upsert flag 10.0.0.9:80 m [] [] 0/0 dp0",
		}},
		{"unchanged", "pods:\n- {name: a, address: \"10.0.0.1:8000\"}\n- {name: b, address: \"10.0.0.2:8000\", model: q, loras: [l], event_port: 6000, replay_port: 6001, dp_size: 2}\n", "", nil},
		{"same pods, other text", "# comment\npods:\n- {name: a, address: \"10.0.0.1:8000\", model: dm}\n- {name: b, address: \"10.0.0.2:8000\", model: q, loras: [l], event_port: 6000, replay_port: 6001, dp_size: 2}\n", "", nil},
		{"b gone, c new, a changed", "pods:\n- {name: a, address: \"10.0.0.1:8000\", model: m2, aliases: [x]}\n- {name: c, address: \"10.0.0.3:8000\"}\n", "", []string{
			"remove b", "upsert a 10.0.0.1:8000 m2 [x] [] 0/0 dp0", "upsert c 10.0.0.3:8000 dm [] [] 0/0 dp0",
		}},
		{"a moved", "pods:\n- {name: a, address: \"10.0.0.7:8000\", model: m2, aliases: [x]}\n- {name: c, address: \"10.0.0.3:8000\"}\n", "", []string{
			"remove a", "upsert a 10.0.0.7:8000 m2 [x] [] 0/0 dp0",
		}},
		{"broken", "pods:\n- {name: a, address: nowhere}\n- {name: d, address: \"10.0.0.4:8000\", shade: red}\n", `address: "nowhere"`, nil},
		{"still broken", "pods:\n- {name: a, address: nowhere}\n- {name: d, address: \"10.0.0.4:8000\", shade: red}\n", "", nil},
		{"not yaml", "pods: [", "did not find expected", nil},
		{"renames a static pod", "pods:\n- {name: flag, address: \"10.0.0.8:8000\"}\n", `"flag" is also a static pod`, nil},
		{"missing", "-", "no such file", nil},
		{"still missing", "-", "", nil},
		{"back, only c", "pods:\n- {name: c, address: \"10.0.0.3:8000\"}\n", "", []string{"remove a"}},
		{"empty", "", "", []string{"remove c"}},
	}
	for _, st := range steps {
		if st.file == "-" {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(path, []byte(st.file), 0o600); err != nil {
			t.Fatal(err)
		}
		err := s.reload()
		if st.wantErr == "" && err != nil || st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
			t.Errorf("%s: reload() = %v, want error %q", st.name, err, st.wantErr)
		}
		if got := sink.take(); strings.Join(got, "\n") != strings.Join(st.want, "\n") {
			t.Errorf("%s: sink calls\n%s\nwant\n%s", st.name, strings.Join(got, "\n"), strings.Join(st.want, "\n"))
		}
	}
	for result, want := range map[string]float64{"ok": 6, "error": 4} {
		if got := testutil.ToFloat64(s.reloads.WithLabelValues(result)); got != want {
			t.Errorf("kvrouter_podsfile_reloads_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if got := testutil.ToFloat64(s.count); got != 1 {
		t.Errorf("kvrouter_podsfile_pods = %v, want 1 (the static pod)", got)
	}
}

// TestStaticPodsWithoutFile: the static pods are applied once; Run has
// nothing to watch.
func TestStaticPodsWithoutFile(t *testing.T) {
	sink := &recordingSink{}
	s := newStaticPods([]pod.Pod{{Name: "a", IP: "10.0.0.1", Port: 80, Model: "m", Ready: true}}, "", "", time.Second, sink, nil, slog.New(slog.DiscardHandler))
	for range 2 {
		if err := s.reload(); err != nil {
			t.Fatal(err)
		}
	}
	if got := sink.take(); len(got) != 1 || got[0] != "upsert a 10.0.0.1:80 m [] [] 0/0 dp0" {
		t.Errorf("sink calls = %q, want one upsert of a", got)
	}
	if err := s.Run(t.Context()); err != nil {
		t.Errorf("Run without a pods file = %v, want nil at once", err)
	}
}

// TestStaticPodsRun: every tick re-reads the file; Run returns when its
// context is done.
func TestStaticPodsRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("pods: [{name: a, address: \"10.0.0.1:8000\", model: m}]\n")
	sink := &recordingSink{}
	s := newStaticPods(nil, path, "", time.Hour, sink, nil, slog.New(slog.DiscardHandler))
	tick := make(chan time.Time) // unbuffered: a send returns once Run is back waiting
	s.tick = tick
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// A tick is taken only once the previous one's reload has finished.
	tick <- time.Time{}
	tick <- time.Time{}
	write("pods: [{name: b, address: \"10.0.0.2:8000\", model: m}]\n")
	tick <- time.Time{}
	tick <- time.Time{}
	want := []string{"upsert a 10.0.0.1:8000 m [] [] 0/0 dp0", "remove a", "upsert b 10.0.0.2:8000 m [] [] 0/0 dp0"}
	if got := sink.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sink calls after two changes = %q, want %q", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// TestServePodsFile runs serve with a config file naming a pods file: its
// pods and the --pod pod are in the fleet.
func TestServePodsFile(t *testing.T) {
	pods := writeFile(t, "pods.yaml", "pods:\n- {name: file-a, address: \"127.0.0.1:1\", model: m, event_port: 2, replay_port: 3}\n")
	cfg := writeFile(t, "kvrouter.yaml", fmt.Sprintf("listen: {admin: \"127.0.0.1:0\", grpc: \"127.0.0.1:0\"}\nlog: {level: error}\npods: {file: %q}\n", pods))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"serve", "--config", cfg, "--pod", "flag-b=127.0.0.1:4,model=m,events=5,replay=6"}
	go func() { done <- run(ctx, args, pw, io.Discard); _ = pw.Close() }()
	base := listenURL(t, pr)
	var got []map[string]any
	getJSON(t, base+"/debug/pods", &got)
	if len(got) != 2 || got[0]["name"] != "file-a" || got[1]["name"] != "flag-b" {
		t.Errorf("/debug/pods = %v, want file-a and flag-b", got)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "kvrouter_podsfile_pods 2") {
		t.Errorf("/metrics = %d, want kvrouter_podsfile_pods 2 in it", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve = %v", err)
	}
}
