// Command vllmpub publishes synthetic vLLM KV events like one vLLM pod: PUB
// bound on -endpoint, replay ROUTER on -replay-endpoint, BlockStored chains
// hashed exactly as vLLM would (-algo, -seed, -block-size) so a kvrouter
// subscriber verifies them, in the wire form chosen by -map-events and
// -bin-hashes.
//
//	go run ./test/cmd/vllmpub -endpoint 'tcp://*:5557' -replay-endpoint 'tcp://*:5558' -rate 100
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Main(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "vllmpub:", err)
		os.Exit(1)
	}
}

// Main runs the command with args until ctx is done or -count batches went out.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vllmpub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := vllmpub.DefaultConfig()
	fs.StringVar(&cfg.Endpoint, "endpoint", cfg.Endpoint, "PUB bind address")
	fs.StringVar(&cfg.ReplayEndpoint, "replay-endpoint", cfg.ReplayEndpoint, `replay ROUTER bind address ("" disables replay)`)
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "topic frame")
	fs.IntVar(&cfg.BufferSteps, "buffer", cfg.BufferSteps, "batches kept for replay")
	algo := fs.String("algo", string(blockhash.SHA256), "hash algorithm: sha256, sha256_cbor, xxhash or xxhash_cbor")
	seed := fs.String("seed", blockhash.DefaultSeed, "PYTHONHASHSEED string")
	blockSize := fs.Int("block-size", blockhash.DefaultBlockSize, "tokens per block")
	blocks := fs.Int("blocks", 16, "blocks per BlockStored event")
	rate := fs.Float64("rate", 10, "batches per second (0: as fast as possible)")
	count := fs.Int("count", 0, "batches to publish (0: until interrupted)")
	var form vllmpub.Form
	fs.BoolVar(&form.MapEvents, "map-events", false, "encode events as maps (newer vLLM) instead of arrays")
	if err := fs.Parse(args); err != nil {
		return err
	}
	h, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.Algorithm(*algo), Seed: *seed, BlockSize: *blockSize})
	if err != nil {
		return err
	}
	p, err := vllmpub.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "vllmpub: publishing on %s, replay on %s\n", p.Endpoint(), p.ReplayEndpoint())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	err = publish(ctx, p, h, *blocks, *rate, *count, form)
	cancel()
	return errors.Join(err, <-done)
}

// publish sends count batches (0: unbounded), each one root chain of blocks
// blocks over fresh tokens.
func publish(ctx context.Context, p *vllmpub.Publisher, h *blockhash.Hasher, blocks int, rate float64, count int, form vllmpub.Form) error {
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	tokens := make([]uint32, blocks*h.BlockSize())
	for i := 0; count == 0 || i < count; i++ {
		for j := range tokens {
			tokens[j] = uint32(i*len(tokens)+j) % 150000
		}
		ev := vllmpub.Event{
			Type: "BlockStored", BlockHashes: h.AppendHashes(nil, tokens, blockhash.Extra{}),
			TokenIDs: tokens, BlockSize: h.BlockSize(),
		}
		payload, err := vllmpub.Encode(vllmpub.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: []vllmpub.Event{ev}}, form)
		if err != nil {
			return err
		}
		if err := p.Publish(ctx, payload); err != nil {
			return err
		}
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}
