// Command kvrouter-demo is what `make run` starts: three simulated vLLM pods
// (real Qwen3 tokenizer, vLLM's block hashes, ZMQ KV events with replay, an
// LRU prefix cache), kvrouter in front of them as an OpenAI-compatible proxy
// with static pods, and a short multi-turn workload (completions, chat turns
// and streamed replies) whose routing decisions it prints. It then keeps
// serving until Ctrl-C and suggests curl commands to try, chat and streaming
// included.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvrouter-demo: %v\n", err)
		os.Exit(1)
	}
}
