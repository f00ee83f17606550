// Command kvrouter-load measures kvrouter's routing decisions under load: it
// starts the kvrouter binary with two models' tokenizers and static pods
// whose KV events it publishes itself (vLLM-faithful publishers, one per
// pod), fills the index to a given number of entries, puts the measured
// prompt's blocks on some pods, then drives kvrouter's ext_proc server with
// the Envoy-faithful client (request and response phases, body in chunks)
// at rising rates (open loop) or from a number of workers (closed loop). For
// every stage it reports latency percentiles, decisions per second, and
// kvrouter's CPU time and RSS read from /proc; -markdown prints the table.
//
//	go run ./test/cmd/kvrouter-load -kind chat -tokens 8000 -rates 100 -stage 20s
//	go run ./test/cmd/kvrouter-load -kind completion -tokens 500 -rates 0 -workers 8
//	go run ./test/cmd/kvrouter-load -tokens 500,8000,32000,100000 -pods 8,64 -fill 10000000 -markdown
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

func main() {
	// Envoy keeps no pool of buffers to clear. gRPC's default hands every
	// received message over 32 KiB (the body kvrouter sends back) a 1 MiB
	// buffer and clears it, CPU taken from the cores this tool shares with
	// kvrouter. Buffers in steps of two clear at most twice the message.
	pool, err := mem.NewBinaryTieredBufferPool(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvrouter-load: %v\n", err)
		os.Exit(1)
	}
	experimental.SetDefaultBufferPool(pool)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvrouter-load: %v\n", err)
		os.Exit(1)
	}
}
