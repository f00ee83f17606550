// Command kvrouter is a KV-cache-aware router for fleets of vLLM pods: Envoy
// calls it as an ext_proc external processor, and it sends every OpenAI-style
// request to the pod that already caches the longest prefix of its prompt,
// weighed against load.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/internal/conf"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// exitCode reports err on stderr and maps it to the process status: 0 for
// success, 2 for command-line mistakes (usage was already printed) and
// configuration problems, 1 otherwise.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, conf.ErrConfig):
		fmt.Fprintf(os.Stderr, "kvrouter: %v\n", err)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "kvrouter: %v\n", err)
		return 1
	}
}
