// Command fleetsim runs kvrouter's fleet simulator over the Mooncake traces
// and the llm-d shared-prefix benchmark with every routing policy, and
// writes a markdown report and its plots, each a PNG and an SVG.
//
//	go run ./test/cmd/fleetsim -traces testdata/traces -out results/sim
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
		fmt.Fprintf(os.Stderr, "fleetsim: %v\n", err)
		os.Exit(1)
	}
}
