package test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/kvlog"
)

// buildKVRouter builds the kvrouter binary into a temporary directory.
func buildKVRouter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kvrouter")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kvrouter")
	cmd.Dir = moduleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kvrouter: %v\n%s", err, out)
	}
	return bin
}

// kvrouterProcess is the real kvrouter binary running as a child.
type kvrouterProcess struct {
	cmd         *exec.Cmd
	admin, grpc string
	envoy       *envoyclient.Client
	// proxy is the OpenAI proxy's address, when --http-addr turns it on.
	proxy string
	// token is the bearer token sent to the debug endpoints: kvrouter
	// asks the API server about it when it discovers pods in Kubernetes.
	token string
	// warns holds the lines it logged at WARN and above.
	warns *lineLog
}

// lineLog keeps the lines written to it, and copies them to stderr.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		l.lines = append(l.lines, line)
	}
	return os.Stderr.Write(b)
}

// since returns the lines logged after the first n.
func (l *lineLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines[min(n, len(l.lines)):])
}

// count is how many lines were logged so far.
func (l *lineLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// faultWarns returns the WARN lines logged after the first n, less the
// decisions' own log lines: a decision slower than 50 ms is logged at WARN
// as it is routed, one line a request, which is the request's log, not a
// fault's.
func (l *lineLog) faultWarns(n int) []string {
	return slices.DeleteFunc(l.since(n), func(line string) bool { return strings.Contains(line, `"msg":"routed"`) })
}

// startKVRouter runs `kvrouter serve` with args on free loopback ports and
// waits until it says where it listens.
func startKVRouter(t *testing.T, bin string, args ...string) *kvrouterProcess {
	t.Helper()
	// TLS on the ext_proc port with a self-signed certificate, as kvrouter
	// serves in Kubernetes; the client encrypts without verifying, as
	// gateways do with an Endpoint Picker's self-signed certificate.
	args = append([]string{"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json", "--grpc-tls", "on"}, args...)
	cmd := exec.Command(bin, args...)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &kvrouterProcess{cmd: cmd, warns: &lineLog{}}
	t.Cleanup(p.kill)
	names := []string{"admin server", "ext_proc gRPC server"}
	if slices.Contains(args, "--http-addr") {
		names = append(names, "OpenAI proxy")
	}
	urls, err := kvlog.Listening(logs, p.warns, names...)
	if err != nil {
		t.Fatal(err)
	}
	p.admin, p.grpc = strings.TrimPrefix(urls["admin server"], "http://"), urls["ext_proc gRPC server"]
	p.proxy = strings.TrimPrefix(urls["OpenAI proxy"], "http://")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}))) //nolint:gosec // a self-signed certificate, as gateways accept it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.envoy = envoyclient.New(conn)
	return p
}

func (p *kvrouterProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// adminDo sends a request to the admin port with the debug token, and
// fails the test unless it answers 200. The caller closes the body.
func (p *kvrouterProcess) adminDo(t *testing.T, method, path string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+p.admin+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		t.Fatalf("%s %s = %s", method, path, resp.Status)
	}
	return resp
}

// podEntries returns /debug/pods' index entries by pod.
func (p *kvrouterProcess) podEntries(t *testing.T) map[string]int {
	t.Helper()
	resp := p.adminDo(t, http.MethodGet, "/debug/pods", nil)
	defer func() { _ = resp.Body.Close() }()
	var pods []struct {
		Name    string `json:"name"`
		Entries int    `json:"index_entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pods); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods {
		out[p.Name] = p.Entries
	}
	return out
}

func (p *kvrouterProcess) ready(t *testing.T) bool {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// route sends body through the kvrouter process and on to the chosen pod.
func route(ctx context.Context, envoy *envoyclient.Client, body string) (map[string]string, error) {
	res, err := envoy.Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{100}})
	if err != nil {
		return nil, err
	}
	if res.Status != 200 {
		return nil, fmt.Errorf("routing = %d %s", res.Status, res.Details)
	}
	resp, err := http.Post("http://"+res.Destination+"/v1/completions", "application/json", strings.NewReader(string(res.UpstreamBody)))
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("pod %s answered %s", res.Destination, resp.Status)
	}
	return res.UpstreamHeaders, nil
}

var restartTopics = []string{"tides", "volcanoes", "glaciers", "comets", "auroras", "monsoons", "deserts", "reefs"}

// TestE2EKVRouterRestart: the real kvrouter binary, following two simulated
// pods given as static pods, is killed while requests flow through it and
// started again. The new process rebuilds its index from the pods' replay
// buffers alone (replay from 0): it then holds as many entries per pod as
// the pod caches, and follow-ups go to the pod that holds their prefix.
func TestE2EKVRouterRestart(t *testing.T) {
	slowE2E(t)
	bin := buildKVRouter(t)
	f := startFleetWith(t, fleetOptions{pods: 2}) // the pods; its router is unused
	args := []string{"--model", "qwen3=" + qwen3Dir(t)}
	for name, sim := range f.sims {
		args = append(args, "--pod", fmt.Sprintf("%s=%s,model=qwen3,events=%d,replay=%d", name, f.pods[name],
			port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint())))
	}
	first := startKVRouter(t, bin, args...)
	if !poll(func() bool { return first.ready(t) }) {
		t.Fatal("kvrouter never became ready")
	}

	// Each pod holds blocks of its own before the traffic starts: new
	// prefixes are placed at random between equal pods, and now and then
	// every topic lands on one, leaving the other's cache (and the check
	// of its rebuilt entries below) empty.
	for name := range f.sims {
		f.post(t, name, prompt("lighthouses near "+name, "Seed?"))
	}

	// Traffic: topics in turn, until the process dies under it.
	var sent, failed atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			topic := restartTopics[i%len(restartTopics)]
			if _, err := route(ctx, first.envoy, prompt(topic, fmt.Sprintf("Question %d?", i))); err != nil {
				failed.Add(1)
				continue
			}
			sent.Add(1)
		}
	})
	if !poll(func() bool { return sent.Load() >= int64(2*len(restartTopics)) }) {
		t.Fatalf("only %d requests went through kvrouter (%d failed)", sent.Load(), failed.Load())
	}
	first.kill()
	stop()
	wg.Wait()
	t.Logf("%d requests routed before the kill, %d failed around it", sent.Load(), failed.Load())

	second := startKVRouter(t, bin, args...)
	if !poll(func() bool { return second.ready(t) }) {
		t.Fatal("the restarted kvrouter never became ready")
	}
	var got map[string]int
	rebuilt := poll(func() bool {
		got = second.podEntries(t)
		for name, sim := range f.sims {
			if n := len(sim.Cached()); n == 0 || got[name] != n {
				return false
			}
		}
		return true
	})
	if !rebuilt {
		want := map[string]int{}
		for name, sim := range f.sims {
			want[name] = len(sim.Cached())
		}
		t.Fatalf("the restarted kvrouter's index holds %v entries by pod, want the pods' caches %v", got, want)
	}
	// The fleet's own in-process index followed the pods all along: the
	// restarted binary must decide as it does.
	for _, topic := range restartTopics {
		body := prompt(topic, "One more question?")
		want, err := f.envoy.Do(context.Background(), envoyclient.Request{Path: "/v1/completions", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := route(context.Background(), second.envoy, body)
		if err != nil {
			t.Fatal(err)
		}
		holder := want.UpstreamHeaders["x-kvrouter-pod"]
		if want.UpstreamHeaders["x-kvrouter-reason"] != "prefix" || h["x-kvrouter-pod"] != holder || h["x-kvrouter-reason"] != "prefix" {
			t.Errorf("follow-up on %s went to %s (%s), want %s by prefix as the router that never restarted (%s)",
				topic, h["x-kvrouter-pod"], h["x-kvrouter-reason"], holder, want.UpstreamHeaders["x-kvrouter-reason"])
		}
	}
}
