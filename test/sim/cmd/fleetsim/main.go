// Command fleetsim runs kvrouter's fleet simulator over the Mooncake traces
// and the llm-d shared-prefix benchmark with every routing policy, and
// writes a markdown report and its plots, each a PNG and an SVG. It is
// its own module, test/sim, so that its plotting library stays out of
// kvrouter's; from the repository root:
//
//	make sim
//	cd test/sim && go run ./cmd/fleetsim -workloads shared-prefix,shared-prefix-overload
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
