// Command kvrouter-load measures kvrouter's routing decisions under load: it
// starts the kvrouter binary with two models' tokenizers and static pods,
// drives its ext_proc server with the Envoy-faithful client (request and
// response phases, body in chunks) at a fixed rate (or as fast as a number
// of workers can), and reports latency percentiles, decisions per second,
// and kvrouter's CPU time and peak RSS read from /proc.
//
//	go run ./test/cmd/kvrouter-load -kind chat -tokens 8000 -rate 100 -duration 20s
//	go run ./test/cmd/kvrouter-load -kind completion -tokens 500 -rate 0 -workers 8
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
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvrouter-load: %v\n", err)
		os.Exit(1)
	}
}
