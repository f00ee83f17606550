package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/kvlog"
)

// TestMain lets the tests run the real main in a child process: the test
// binary re-executes itself with KVROUTER_TEST_MAIN=1.
func TestMain(m *testing.M) {
	// In a CI pod, serve would default to in-cluster discovery.
	_ = os.Unsetenv("KUBERNETES_SERVICE_HOST")
	if os.Getenv("KVROUTER_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// listenURL reads serve's JSON log until the admin server says where it
// listens.
func listenURL(t *testing.T, r io.Reader) string {
	t.Helper()
	return announced(t, r, "admin server")["admin server"]
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestServeAdminEndpoints(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json", "--pod", "a=127.0.0.1:1,model=m,events=2,replay=3"}, io.Discard, pw)
		_ = pw.Close()
	}()
	base := listenURL(t, pr)
	// Serving starts before readiness is reported: wait for it.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if code, _ := get(t, base+"/readyz"); code == http.StatusOK {
			break
		}
	}

	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/healthz", http.StatusOK, "ok"},
		{"/readyz", http.StatusOK, "ready: 1 pod to route to\n"},
		{"/metrics", http.StatusOK, `kvrouter_build_info{goversion="go`},
		{"/metrics", http.StatusOK, "go_goroutines"},
		{"/debug/pprof/", http.StatusOK, "goroutine"},
		{"/nope", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		code, body := get(t, base+tt.path)
		if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
			t.Errorf("GET %s = %d %.80q, want %d containing %q", tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a performance bound
		t.Fatal("serve did not return after its context was canceled")
	}
}

func TestServeAddressInUse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		_ = run(ctx, []string{"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json"}, io.Discard, pw)
	}()
	addr := strings.TrimPrefix(listenURL(t, pr), "http://")
	err := run(context.Background(), []string{"serve", "--admin-addr", addr, "--grpc-addr", "127.0.0.1:0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "admin server") {
		t.Fatalf("second serve on %s = %v, want an admin server listen error", addr, err)
	}
}

// TestProcessSignals runs the real binary: SIGINT and SIGTERM stop serve with
// status 0, and an unknown command exits 2 with a hint at --help.
func TestProcessSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json")
			cmd.Env = append(os.Environ(), "KVROUTER_TEST_MAIN=1")
			logs, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			listenURL(t, logs)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("serve after %v: %v, want exit status 0", sig, err)
			}
		})
	}
	t.Run("unknown command", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "nonsense")
		cmd.Env = append(os.Environ(), "KVROUTER_TEST_MAIN=1")
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "See 'kvrouter --help' for usage.") {
			t.Fatalf("kvrouter nonsense = exit %d (%v) %q, want exit 2 with a hint at --help", code, err, out)
		}
	})
}

// TestServeNothingToRoute runs serve with no pod and no discovery: it warns
// once at start, and /readyz answers 503 saying why. Its start messages are
// logged once, on stderr only.
func TestServeNothingToRoute(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	var log syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "", "--log-format", "json"}, &stdout, &log)
	}()
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		urls, err := kvlog.Listening(strings.NewReader(log.String()), nil, "admin server")
		if err == nil {
			base = urls["admin server"]
		}
	}
	if base == "" {
		t.Fatalf("serve never logged its admin address:\n%s", log.String())
	}
	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready: "+nothingToRoute+"\n" {
		t.Errorf("GET /readyz = %d %q, want 503 saying there is nothing to route to", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve = %v", err)
	}
	if n := strings.Count(log.String(), `"msg":"admin server listening"`); n != 1 {
		t.Errorf("the admin server's start was logged %d times, want once:\n%s", n, log.String())
	}
	if n := strings.Count(log.String(), `"level":"WARN","msg":"`+nothingToRoute); n != 1 {
		t.Errorf("the warning that there is nothing to route to was logged %d times, want once:\n%s", n, log.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("serve wrote %q on stdout, want its log on stderr only", stdout.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
