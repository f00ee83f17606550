package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// detailed is a recorder that writes down every field of an upserted pod.
type detailed struct{ recorder }

func (d *detailed) Upsert(p pod.Pod) {
	d.record(fmt.Sprintf("upsert %s %s %s %v %v %d/%d dp%d", p.Name, p.Endpoint(), p.Model, p.Aliases, p.LoRAs, p.EventPort, p.ReplayPort, p.DPSize))
}

// parseJSON is the tests' pods file format: a JSON array of pods, all
// ready, with no unknown field; an empty file lists none.
func parseJSON(data []byte) ([]pod.Pod, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var pods []pod.Pod
	if err := dec.Decode(&pods); err != nil {
		return nil, err
	}
	for i := range pods {
		pods[i].Ready = true
	}
	return pods, nil
}

// TestStaticReload drives the pods file through its life: loaded, pods
// added, changed, moved and removed; broken edits and a missing file keep
// the last good pods, are reported once each, and are counted.
func TestStaticReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.json")
	static := []pod.Pod{{Name: "flag", IP: "10.0.0.9", Port: 80, Model: "m", Ready: true}}
	r := &detailed{}
	s, err := NewStatic(static, path, parseJSON, time.Second, r, prometheus.NewRegistry(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	const (
		a      = `{"name": "a", "ip": "10.0.0.1", "port": 8000, "model": "dm"}`
		b      = `{"name": "b", "ip": "10.0.0.2", "port": 8000, "model": "q", "loras": ["l"], "eventPort": 6000, "replayPort": 6001, "dpSize": 2}`
		a2     = `{"name": "a", "ip": "10.0.0.1", "port": 8000, "model": "m2", "aliases": ["x"]}`
		aMoved = `{"name": "a", "ip": "10.0.0.7", "port": 8000, "model": "m2", "aliases": ["x"]}`
		c      = `{"name": "c", "ip": "10.0.0.3", "port": 8000, "model": "dm"}`
	)
	steps := []struct {
		name, file string // file "-": removed
		wantErr    string
		want       []string
	}{
		{"first", "[" + a + ", " + b + "]", "", []string{
			"upsert a 10.0.0.1:8000 dm [] [] 0/0 dp0", "upsert b 10.0.0.2:8000 q [] [l] 6000/6001 dp2", "upsert flag 10.0.0.9:80 m [] [] 0/0 dp0",
		}},
		{"unchanged", "[" + a + ", " + b + "]", "", nil},
		{"same pods, other text", "[\n  " + b + ",\n  " + a + "\n]\n", "", nil},
		{"b gone, c new, a changed", "[" + a2 + ", " + c + "]", "", []string{
			"remove b", "upsert a 10.0.0.1:8000 m2 [x] [] 0/0 dp0", "upsert c 10.0.0.3:8000 dm [] [] 0/0 dp0",
		}},
		{"a moved", "[" + aMoved + ", " + c + "]", "", []string{
			"remove a", "upsert a 10.0.0.7:8000 m2 [x] [] 0/0 dp0",
		}},
		{"broken", `[{"name": "a", "ip": "10.0.0.1", "port": 8000, "shade": "red"}]`, `unknown field "shade"`, nil},
		{"still broken", `[{"name": "a", "ip": "10.0.0.1", "port": 8000, "shade": "red"}]`, "", nil},
		{"not json", "[", "unexpected EOF", nil},
		{"renames a static pod", `[{"name": "flag", "ip": "10.0.0.8", "port": 8000, "model": "m"}]`, path + `: pod "flag" is also a static pod`, nil},
		{"a pod that is not valid", `[{"name": "a", "ip": "nowhere", "port": 8000, "model": "m"}]`, `"nowhere" is not an IP address`, nil},
		{"a name twice", "[" + c + ", " + c + "]", `pod name "c" used twice`, nil},
		{"missing", "-", "no such file", nil},
		{"still missing", "-", "", nil},
		{"back, only c", "[" + c + "]", "", []string{"remove a"}},
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
		err := s.Reload()
		if st.wantErr == "" && err != nil || st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
			t.Errorf("%s: Reload() = %v, want error %q", st.name, err, st.wantErr)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "discovery: pods file: ") {
			t.Errorf("%s: Reload() = %q, want it prefixed %q", st.name, err, "discovery: pods file: ")
		}
		if got := r.take(); strings.Join(got, "\n") != strings.Join(st.want, "\n") {
			t.Errorf("%s: consumer calls\n%s\nwant\n%s", st.name, strings.Join(got, "\n"), strings.Join(st.want, "\n"))
		}
	}
	for result, want := range map[string]float64{"ok": 6, "error": 6} {
		if got := testutil.ToFloat64(s.metrics.reloads.WithLabelValues(result)); got != want {
			t.Errorf("kvrouter_podsfile_reloads_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if got := testutil.ToFloat64(s.metrics.pods); got != 1 {
		t.Errorf("kvrouter_podsfile_pods = %v, want 1 (the static pod)", got)
	}
}

// TestStaticWithoutFile: the static pods are applied once; Run has nothing
// to watch.
func TestStaticWithoutFile(t *testing.T) {
	r := &detailed{}
	s, err := NewStatic([]pod.Pod{{Name: "a", IP: "10.0.0.1", Port: 80, Model: "m", Ready: true}}, "", nil, 0, r, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.take(); len(got) != 1 || got[0] != "upsert a 10.0.0.1:80 m [] [] 0/0 dp0" {
		t.Errorf("consumer calls = %q, want one upsert of a", got)
	}
	if err := s.Run(t.Context()); err != nil {
		t.Errorf("Run without a pods file = %v, want nil at once", err)
	}
}

// TestStaticRun: every tick re-reads the file; Run returns when its context
// is done.
func TestStaticRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pods.json")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`[{"name": "a", "ip": "10.0.0.1", "port": 8000, "model": "m"}]`)
	r := &detailed{}
	s, err := NewStatic(nil, path, parseJSON, time.Hour, r, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time) // unbuffered: a send returns once Run is back waiting
	s.tick = tick
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// A tick is taken only once the previous one's reload has finished.
	tick <- time.Time{}
	tick <- time.Time{}
	write(`[{"name": "b", "ip": "10.0.0.2", "port": 8000, "model": "m"}]`)
	tick <- time.Time{}
	tick <- time.Time{}
	want := []string{"upsert a 10.0.0.1:8000 m [] [] 0/0 dp0", "remove a", "upsert b 10.0.0.2:8000 m [] [] 0/0 dp0"}
	if got := r.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("consumer calls after two changes = %q, want %q", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// TestNewStaticErrors: what NewStatic refuses, with an error rather than a
// panic.
func TestNewStaticErrors(t *testing.T) {
	good := []pod.Pod{{Name: "a", IP: "10.0.0.1", Port: 80, Model: "m", Ready: true}}
	reg := prometheus.NewRegistry()
	if _, err := NewStatic(good, "", nil, 0, &detailed{}, reg, quiet()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		static   []pod.Pod
		path     string
		parse    ParseFunc
		interval time.Duration
		consumer Consumer
		reg      prometheus.Registerer
		wantErr  string
	}{
		{"no consumer", good, "", nil, 0, nil, nil, "no consumer"},
		{"no parse function", good, "/pods", nil, time.Second, &detailed{}, nil, "no parse function"},
		{"no interval", good, "/pods", parseJSON, 0, &detailed{}, nil, "interval 0s, want > 0"},
		{"a static pod twice", append(good, good...), "", nil, 0, &detailed{}, nil, `pod name "a" used twice`},
		{"a static pod not valid", []pod.Pod{{Name: "b", IP: "host"}}, "", nil, 0, &detailed{}, nil, `"host" is not an IP address`},
		{"metrics registered twice", good, "", nil, 0, &detailed{}, reg, "register pods file metrics"},
	}
	for _, tt := range tests {
		_, err := NewStatic(tt.static, tt.path, tt.parse, tt.interval, tt.consumer, tt.reg, quiet())
		if err == nil || !strings.HasPrefix(err.Error(), "discovery: ") || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: NewStatic = %v, want a discovery error containing %q", tt.name, err, tt.wantErr)
		}
	}
}
