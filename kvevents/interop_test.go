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

	"github.com/kvrouter/kvrouter/internal/pod"
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

// send writes one command line to publisher.py.
func (p *pyPublisher) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
}

// follow has f follow the Python publisher as pod-a and waits for the
// connection.
func (p *pyPublisher) follow(f *fleet) {
	f.t.Helper()
	f.follow("pod-a", &pub{eventPort: p.ports.Event, replayPort: p.ports.Replay})
	eventually(f.t, "connection", func() bool { return f.connected("pod-a") })
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
			py.follow(f)
			f.waitHashes("pod-a", round0...)
			py.send(t, "next")
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

// TestInteropFirstBatchLost is the rank's first batch lost after an empty
// replay (see TestSubscriberFirstBatchLost) with the Python publisher: it
// starts idle, the subscriber's replay from seq 0 is empty, then the first
// three batches of a round (a store, a clear, a store) reach the replay
// buffer only and the rest arrive live. The first live seq is a gap; the
// replay brings the lost store back.
func TestInteropFirstBatchLost(t *testing.T) {
	checkGoroutines(t)
	py := startPyPublisher(t, "--idle")
	f := newFleet(t, testConfig())
	py.follow(f)
	eventually(t, "the idle replay", func() bool { return f.counter(f.mgr.metrics.replays, "pod-a", "ok") >= 2 })
	py.send(t, "lose 3")
	f.waitHashes("pod-a", py.round(t)...)
	if got := f.counter(f.mgr.metrics.gaps, "pod-a"); got != 1 {
		t.Errorf("gaps = %v, want 1", got)
	}
}

// TestInteropSequenceBack is a publisher restart the socket never showed
// (see TestSubscriberSequenceBackOnFirstConnection) with the Python
// publisher: within the subscriber's first connection the sequence goes from
// 15 back to 0. The old entries go, the restart is counted once, and the new
// process's batches, whose seqs are all below the old last one, are applied.
func TestInteropSequenceBack(t *testing.T) {
	checkGoroutines(t)
	py := startPyPublisher(t)
	f := newFleet(t, testConfig())
	py.follow(f)
	f.waitHashes("pod-a", py.round(t)...) // round 0, by replay
	py.send(t, "next")
	f.waitHashes("pod-a", py.round(t)...) // round 1, live
	py.send(t, "reset")
	var r struct{ Reset bool }
	if py.read(t, &r); !r.Reset {
		t.Fatal("publisher.py did not confirm the reset")
	}
	py.send(t, "next")
	f.waitHashes("pod-a", py.round(t)...) // round 2, from seq 0
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"restarts", f.counter(f.mgr.metrics.restarts, "pod-a"), 1},
		{"clears{restart}", f.counter(f.mgr.metrics.clears, "pod-a", "restart"), 1},
		{"gaps", f.counter(f.mgr.metrics.gaps, "pod-a"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestInteropRestartVerifiesAfresh kills a Python publisher whose hashes
// kvrouter verified (PYTHONHASHSEED 42, as kvrouter's) and starts another on
// the same ports with seed 7, as a static pod restarted without the seed
// would: the new process's chains are judged afresh and read "mismatch".
func TestInteropRestartVerifiesAfresh(t *testing.T) {
	checkGoroutines(t)
	ev, rp := freePorts(t, 1), freePorts(t, 1)
	args := func(seed string) []string {
		return []string{"--event-port", fmt.Sprint(ev), "--replay-port", fmt.Sprint(rp), "--seed", seed}
	}
	cfg := testConfig()
	cfg.Hash = blockhash.Config{Algorithm: blockhash.SHA256, Seed: "42", BlockSize: 16}
	cfg.VerifySample = 1
	cfg.VerifyMinFailures = 2 // each round has two root chains
	verification := func(f *fleet) Verification {
		if st := f.mgr.Status(); len(st) == 1 {
			return st[0].Verification
		}
		return VerifyUnknown
	}
	py1 := startPyPublisher(t, args("42")...)
	f := newFleet(t, cfg)
	py1.follow(f)
	f.waitHashes("pod-a", py1.round(t)...)
	if got := verification(f); got != Verified {
		t.Fatalf("verification with seed 42 = %v, want %v", got, Verified)
	}
	if err := py1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := py1.cmd.Wait(); err == nil {
		t.Fatal("killed publisher.py exited cleanly")
	}
	eventually(t, "disconnection", func() bool { return !f.connected("pod-a") })
	py2 := startPyPublisher(t, args("7")...)
	f.waitHashes("pod-a", py2.round(t)...)
	eventually(t, "mismatch", func() bool { return verification(f) == VerifyMismatch },
		func() string { return fmt.Sprintf("verification = %v", verification(f)) })
	if got := f.counter(f.mgr.metrics.restarts, "pod-a"); got != 1 {
		t.Errorf("restarts = %v, want 1", got)
	}
}

// TestInteropRandomRootRekeyed follows a Python publisher whose real vLLM
// chains start from 32 random bytes, as a vLLM started without
// PYTHONHASHSEED: the pod mismatches, and its index entries become what
// Python computes from the same token ids with kvrouter's seed (a root
// chain, a chain continued from it, a LoRA chain); the round's synthetic
// blocks of another block size or without token ids are not rekeyed.
func TestInteropRandomRootRekeyed(t *testing.T) {
	checkGoroutines(t)
	py := startPyPublisher(t, "--seed", "42", "--random-root")
	type round struct {
		Rekeyed []uint64 `json:"rekeyed"`
	}
	var round0, round1 round
	py.read(t, &round0)
	if len(round0.Rekeyed) != 6 {
		t.Fatalf("publisher.py's rekeyed hashes = %v, want 6", round0.Rekeyed)
	}
	cfg := testConfig()
	cfg.RekeyBlocks = DefaultConfig().RekeyBlocks
	cfg.Hash = blockhash.Config{Algorithm: blockhash.SHA256, Seed: "42", BlockSize: 16}
	cfg.VerifySample = 1
	cfg.VerifyMinFailures = 2 // the round's first two root chains
	f := newFleet(t, cfg)
	py.follow(f)
	f.waitHashes("pod-a", round0.Rekeyed...) // round 0, by replay
	py.send(t, "next")
	py.read(t, &round1)
	f.waitHashes("pod-a", round1.Rekeyed...) // round 1, live, after AllBlocksCleared
	if st := f.mgr.Status(); len(st) != 1 || st[0].Verification != VerifyMismatch || !st[0].Rekeyed {
		t.Errorf("Status() = %+v, want pod-a mismatch and rekeyed", st)
	}
	if got := f.counter(f.mgr.metrics.rekeyFailed, "pod-a", "parent_missing"); got != 0 {
		t.Errorf("rekey failures parent_missing = %v, want 0", got)
	}
	if got := f.counter(f.mgr.metrics.rekeyFailed, "pod-a", "block_size"); got == 0 {
		t.Error("rekey failures block_size = 0, want the synthetic blocks of size 4 counted")
	}
}

// TestInteropEngines follows publisher.py playing SGLang (16-token pages,
// one event per page, tagged arrays and maps, signed ids of its own) and
// TensorRT-LLM (32-token blocks as maps): the index ends each round with
// exactly kvrouter's hashes of the live blocks' token ids, a 32-token
// block being two of kvrouter's; SGLang's page of one token is refused and
// counted.
func TestInteropEngines(t *testing.T) {
	for _, engine := range []string{pod.EngineSGLang, pod.EngineTRTLLM} {
		t.Run(engine, func(t *testing.T) {
			checkGoroutines(t)
			py := startPyPublisher(t, "--engine", engine, "--seed", "42")
			want := py.round(t)
			cfg := testConfig()
			cfg.RekeyBlocks = DefaultConfig().RekeyBlocks
			cfg.Hash = blockhash.Config{Algorithm: blockhash.SHA256, Seed: "42", BlockSize: 16}
			cfg.DefaultEngine = engine
			f := newFleet(t, cfg)
			py.follow(f)
			f.waitHashes("pod-a", want...) // round 0, by replay
			py.send(t, "next")
			f.waitHashes("pod-a", py.round(t)...) // round 1, live, after AllBlocksCleared
			if st := f.mgr.Status(); len(st) != 1 || st[0].Engine != engine || !st[0].Rekeyed || st[0].Verification != VerifyUnknown {
				t.Errorf("Status() = %+v, want %s, rekeyed, not verified", st, engine)
			}
			wantRefused := 0.0
			if engine == pod.EngineSGLang {
				wantRefused = 2 // a page of one token per round
			}
			if got := f.counter(f.mgr.metrics.rekeyFailed, "pod-a", "block_size"); got != wantRefused {
				t.Errorf("rekey failures block_size = %v, want %v", got, wantRefused)
			}
		})
	}
}
