package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// childEnv makes the test binary run a simulated vLLM pod instead of the
// tests, so a test can kill a real pod process and start it again.
const childEnv = "KVROUTER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "vllmsim" {
		if err := runSimChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "vllmsim child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runSimChild serves one simulated pod on the addresses of SIM_HTTP,
// SIM_EVENTS and SIM_REPLAY, with the tokenizer in SIM_TOKENIZER, prints
// "ready <http> <events> <replay>" and serves until stdin closes.
func runSimChild(stdin io.Reader, stdout io.Writer) error {
	dir := os.Getenv("SIM_TOKENIZER")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	pub := vllmpub.DefaultConfig()
	pub.Endpoint, pub.ReplayEndpoint = os.Getenv("SIM_EVENTS"), os.Getenv("SIM_REPLAY")
	pod, err := vllmsim.New(vllmsim.Config{Name: "proc", Model: "qwen3", Tokenizer: tok, Hash: blockhash.DefaultConfig(), Events: pub, PrefillPerToken: time.Microsecond, DecodePerToken: time.Microsecond})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", os.Getenv("SIM_HTTP"))
	if err != nil {
		return errors.Join(err, pod.Publisher().Close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{Handler: pod.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	done := make(chan error, 1)
	go func() { done <- pod.Run(ctx) }()
	fmt.Fprintf(stdout, "ready %s %s %s\n", ln.Addr(), pod.Publisher().Endpoint(), pod.Publisher().ReplayEndpoint())
	_, _ = io.Copy(io.Discard, stdin) // the parent went away or asked to stop
	cancel()
	return errors.Join(srv.Close(), <-done)
}

// simProcess is a simulated pod running as a child process.
type simProcess struct {
	cmd                        *exec.Cmd
	stdin                      io.Closer
	http                       string
	eventEndpoint, replayPoint string
}

// startSimProcess starts a pod process bound to the given addresses ("…:0"
// and "tcp://127.0.0.1:*" pick free ports).
func startSimProcess(t *testing.T, httpAddr, events, replay string) *simProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"=vllmsim", "SIM_TOKENIZER="+qwen3Dir(t),
		"SIM_HTTP="+httpAddr, "SIM_EVENTS="+events, "SIM_REPLAY="+replay)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &simProcess{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { p.kill() })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		s.Scan()
		line <- s.Text()
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if _, err := fmt.Sscanf(l, "ready %s %s %s", &p.http, &p.eventEndpoint, &p.replayPoint); err != nil {
			t.Fatalf("pod process said %q: %v", l, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("pod process did not start within 60s")
	}
	return p
}

// kill ends the process with SIGKILL, as the OOM killer or a node failure
// would: no socket is closed cleanly.
func (p *simProcess) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	_ = p.cmd.Wait()
}

// cached returns the truth function of the process's cache.
func (p *simProcess) cached(t *testing.T) func() []uint64 {
	return func() []uint64 {
		resp, err := http.Get("http://" + p.http + "/debug/cache")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var out []uint64
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// addProcess makes the fleet route to, and follow the events of, p.
func (f *fleet) addProcess(t *testing.T, name string, p *simProcess) {
	t.Helper()
	f.pods[name] = p.http
	f.routes.Upsert(readyPod(t, name, p.http, "qwen3"))
	if err := f.events.Ensure(kvpod.Pod{Name: name, IP: "127.0.0.1", EventPort: port(t, p.eventEndpoint), ReplayPort: port(t, p.replayPoint), Model: "qwen3"}); err != nil {
		t.Fatal(err)
	}
}

// TestFaultPodProcessKilled: a pod process is SIGKILLed and started again
// on the same ports, numbering its batches from 0 with an empty cache. The
// subscriber detects the restart, clears the pod (counted), and the index
// then holds exactly the new process's cache; routing by prefix resumes for
// what it stores, and nothing routes by the dead process's blocks.
func TestFaultPodProcessKilled(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 1, events: fastEvents})
	first := startSimProcess(t, "127.0.0.1:0", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
	f.addProcess(t, "proc", first)
	f.post(t, "proc", prompt("tides", "Why two a day?"))
	f.post(t, "proc", prompt("volcanoes", "Why do they erupt?"))
	f.awaitExact(t, "proc", first.cached(t))

	first.kill()
	second := startSimProcess(t, first.http, first.eventEndpoint, first.replayPoint)
	f.post(t, "proc", prompt("glaciers", "How do they move?"))
	f.awaitExact(t, "proc", second.cached(t))
	f.awaitMetric(t, "clears_total", "proc", 1, "reason", "restart")
	f.expectRouted(t, "glaciers", "proc")
	if res := f.send(t, prompt("tides", "And the moon?")); !strings.HasPrefix(res.UpstreamHeaders["x-kvrouter-cached-blocks"], "0/") {
		t.Fatalf("the killed process's prefix matched %s blocks, want 0", res.UpstreamHeaders["x-kvrouter-cached-blocks"])
	}
}
