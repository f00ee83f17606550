package kvevents

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

const debianPython = "/usr/bin/python3"

// needPythonZMQ skips (or, in CI, fails) when Debian's python3-zmq and
// python3-msgpack are missing.
func needPythonZMQ(t *testing.T) {
	t.Helper()
	out, err := exec.Command(debianPython, "-c", "import zmq, msgpack").CombinedOutput()
	if err == nil {
		return
	}
	msg := "python3-zmq and python3-msgpack for " + debianPython + " are missing (run make deps): " + string(out)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// pyPublisher is test/pypub/publisher.py running in a child process.
type pyPublisher struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	ports struct {
		Event  int `json:"event_port"`
		Replay int `json:"replay_port"`
	}
}

func startPyPublisher(t *testing.T, args ...string) *pyPublisher {
	t.Helper()
	needPythonZMQ(t)
	script, err := filepath.Abs("../test/pypub/publisher.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(debianPython, append([]string{script}, args...)...)
	cmd.Stderr = os.Stderr
	p := &pyPublisher{cmd: cmd}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.stdin.Close(); err != nil && cmd.ProcessState == nil { // the script exits when its stdin closes
			t.Errorf("close publisher.py's stdin: %v", err)
		}
		if cmd.ProcessState != nil {
			return // killed and waited for by the test
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("publisher.py: %v", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("publisher.py did not exit when its stdin closed (killed: %v)", <-done)
		}
	})
	p.lines = bufio.NewScanner(stdout)
	p.read(t, &p.ports)
	return p
}

func (p *pyPublisher) read(t *testing.T, v any) {
	t.Helper()
	if !p.lines.Scan() {
		t.Fatalf("publisher.py ended early: %v", p.lines.Err())
	}
	if err := json.Unmarshal(p.lines.Bytes(), v); err != nil {
		t.Fatalf("publisher.py said %q: %v", p.lines.Text(), err)
	}
}

// round reads the hashes the pod must hold after the round just published.
func (p *pyPublisher) round(t *testing.T) []uint64 {
	t.Helper()
	var r struct {
		Expected []uint64 `json:"expected"`
	}
	p.read(t, &r)
	if len(r.Expected) == 0 {
		t.Fatal("publisher.py expects no hashes")
	}
	return r.Expected
}

// TestInteropPythonPublisher follows a Python publisher written from the
// spec: round 0 is published before the subscriber connects (so it arrives
// by replay), round 1 live; both use every wire form.
func TestInteropPythonPublisher(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		args  []string
		want  Verification
	}{
		{"three-frame replay replies", "", nil, VerifyMismatch},
		{"topic and four-frame replay replies", "kv@", []string{"--topic", "kv@model", "--topic-in-replay"}, VerifyMismatch},
		{"real vLLM hashes verify", "", []string{"--seed", "42"}, Verified},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			py := startPyPublisher(t, tc.args...)
			round0 := py.round(t)
			cfg := testConfig()
			cfg.Topic = tc.topic
			cfg.Hash = blockhash.Config{Algorithm: blockhash.SHA256, Seed: "42", BlockSize: 16}
			cfg.VerifySample = 1 // check every event
			f := newFleet(t, cfg)
			f.follow("pod-a", &pub{eventPort: py.ports.Event, replayPort: py.ports.Replay})
			f.waitHashes("pod-a", round0...)
			eventually(t, "connection", func() bool { return f.connected("pod-a") })
			if _, err := io.WriteString(py.stdin, "next\n"); err != nil {
				t.Fatal(err)
			}
			round1 := py.round(t)
			f.waitHashes("pod-a", round1...)
			if st := f.mgr.Status(); len(st) != 1 || st[0].Verification != tc.want {
				t.Errorf("Status() = %+v, want pod-a %v", st, tc.want)
			}
			ok := f.counter(f.mgr.metrics.hashChecks, "pod-a", "ok")
			if want := map[Verification]float64{Verified: 6, VerifyMismatch: 0}[tc.want]; ok < want {
				t.Errorf("hash checks ok = %v, want >= %v (root, continued and LoRA chains of two rounds)", ok, want)
			}
			if got := f.counter(f.mgr.metrics.decodeErrors, "pod-a"); got != 0 {
				t.Errorf("decode errors = %v, want 0", got)
			}
			if got := f.counter(f.mgr.metrics.ignored, "pod-a"); got < 3 {
				t.Errorf("ignored events = %v, want >= 3 (two unknown tags, one sliding-window group)", got)
			}
		})
	}
}

// TestInteropPublisherKilled kills the Python publisher (SIGKILL, no
// goodbye) and starts another process on the same ports that has published
// as many batches as the first: its sequence numbers continue where the old
// ones stopped, so only the reconnection's probe of the last batch tells
// the restart, and the old process's entries must go.
func TestInteropPublisherKilled(t *testing.T) {
	checkGoroutines(t)
	ev, rp := freePorts(t, 1), freePorts(t, 1)
	args := func(base int) []string {
		return []string{"--event-port", fmt.Sprint(ev), "--replay-port", fmt.Sprint(rp), "--base", fmt.Sprint(base)}
	}
	py1 := startPyPublisher(t, args(1000)...)
	round := py1.round(t)
	f := newFleet(t, testConfig())
	f.follow("pod-a", &pub{eventPort: ev, replayPort: rp})
	f.waitHashes("pod-a", round...)
	if err := py1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := py1.cmd.Wait(); err == nil {
		t.Fatal("killed publisher.py exited cleanly")
	}
	eventually(t, "disconnection", func() bool { return !f.connected("pod-a") })
	py2 := startPyPublisher(t, args(5000)...)
	round = py2.round(t)
	f.waitHashes("pod-a", round...)
	if got := f.counter(f.mgr.metrics.restarts, "pod-a"); got != 1 {
		t.Errorf("restarts = %v, want 1", got)
	}
}
