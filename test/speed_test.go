package test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	kvfleet "github.com/kvrouter/kvrouter/router/fleet"
)

// TestE2ELearnedSpeed: two simulated pods, one prefilling at 50µs a
// token, the other at 100µs (half the speed), each sent uncached prompts
// one after another for 8 s. The router's real scraper reads their
// /metrics and learns each pod's speed within 15%, the slow one at half
// the fast one's (within 15%), and the router prices each pod by it. It
// reads each pod's KV cache size too (vllm:cache_config_info), and that its
// prefix cache missed every prompt token.
func TestE2ELearnedSpeed(t *testing.T) {
	perToken := []time.Duration{50 * time.Microsecond, 100 * time.Microsecond}
	f := startFleetWith(t, fleetOptions{pods: 2, sim: func(i int, c *vllmsim.Config) { c.PrefillPerToken = perToken[i] }})
	scraper, err := kvfleet.NewScraper(f.routes, nil, 100*time.Millisecond, 0, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	scraped := make(chan error, 1)
	go func() { scraped <- scraper.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-scraped; err != nil {
			t.Error(err)
		}
	}()
	text := strings.Repeat("Prefill speed is learned from the counters of each pod. ", 40)
	deadline := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		addr := f.pods[fmt.Sprintf("sim-%d", i)]
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				body := fmt.Sprintf(`{"model":"qwen3","prompt":"Request %d of pod %d. %s"}`, n, i, text) // uncached from its first block
				resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("pod %d: %s", i, resp.Status)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the last scrapes
	learned := make([]float64, 2)
	for i := range 2 {
		name := fmt.Sprintf("sim-%d", i)
		l := f.routes.Load(name)
		sp := l.Speed()
		if sp == nil {
			t.Fatalf("%s: nothing learned from 8 s of prefill", name)
		}
		learned[i] = sp.Busy / sp.Tokens
		t.Logf("%s: learned %.0f tokens/s from %.1f s of prefill (configured %.0f)", name, 1/learned[i], sp.Busy, 1/perToken[i].Seconds())
		if want := perToken[i].Seconds(); learned[i] < want*0.85 || learned[i] > want*1.15 {
			t.Errorf("%s: learned %.0f tokens/s from %.1f s of prefill, want %.0f ±15%%", name, 1/learned[i], sp.Busy, 1/want)
		}
		// The router prices the pod by it, pooled with the prior (10,000 tokens/s).
		if got, want := f.router.PrefillSecondsPerToken(l), sp.SecondsPerToken(1e-4, 1.83e-5); got != want || (i == 0 && got >= 1e-4*0.9) {
			t.Errorf("%s: priced at %.0f tokens/s, want the learned %.0f (above the prior's 10,000)", name, 1/got, 1/want)
		}
	}
	for i := range 2 {
		l := f.routes.Load(fmt.Sprintf("sim-%d", i))
		if got, want := l.KVCapacity.Load(), int64(2048*blockhash.DefaultConfig().BlockSize); got != want {
			t.Errorf("sim-%d: KV cache of %d tokens scraped, want vllmsim's default %d", i, got, want)
		}
		if got := l.MissShare(); got != 1 {
			t.Errorf("sim-%d: miss share %.3f of prompts uncached from their first block, want 1", i, got)
		}
	}
	if ratio := learned[0] / learned[1]; ratio < 0.5*0.85 || ratio > 0.5*1.15 {
		t.Errorf("fast pod's cost per token / slow pod's = %.2f, want 0.5 ±15%%", ratio)
	}
}
