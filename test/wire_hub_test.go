package test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/toxiproxy"
)

// TestWireFaultsHub: the kvrouter binary downloads its pods' tokenizer
// from a hub behind toxiproxy that resets, stalls or drips at 10 KB/s.
// Meanwhile the model is routed by load (no request fails, p99 under
// decisionBound) and /readyz names its missing tokenizer; each download is
// bounded by --hub-timeout. Once the wire heals the download is retried by
// itself and the model is tokenized exactly.
func TestWireFaultsHub(t *testing.T) {
	hub, tokenFile := qwen3Hub(t)
	u, err := url.Parse(hub.URL)
	if err != nil {
		t.Fatal(err)
	}
	tp := toxiproxy.New(t)
	proxy, err := tp.Proxy("hub", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildKVRouter(t)
	f := startFleetWith(t, fleetOptions{pods: 2, model: hubModel})
	body := fmt.Sprintf(`{"model":%q,"prompt":"Why are there two tides a day?"}`, hubModel)

	for _, c := range []struct {
		name   string
		toxics []toxiproxy.Toxic
	}{
		{"reset", []toxiproxy.Toxic{resetPeer()}},
		{"stall", stall()},
		{"10KB/s", []toxiproxy.Toxic{drip(10)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, x := range c.toxics {
				if err := proxy.Add(x); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{
				"--hf-cache", t.TempDir(), "--hub-endpoint", "http://" + proxy.Addr, "--hub-token-file", tokenFile,
				"--hub-offline=false", "--hub-timeout", "3s",
			}
			for name, sim := range f.sims {
				args = append(args, "--pod", fmt.Sprintf("%s=%s,model=%s,events=%d,replay=%d", name, f.pods[name], hubModel,
					port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint())))
			}
			kv := startKVRouter(t, bin, args...)
			var loop decisionLoop
			ctx, stop := context.WithCancel(context.Background())
			var done sync.WaitGroup
			done.Go(func() { loop.run(ctx, kv, func(int) string { return body }) })
			shown := pollFor(30*time.Second, func() bool { return kv.ready(t) && strings.Contains(kv.readyz(t), hubModel+" tokenizer") })
			time.Sleep(4 * time.Second) // past one download's bound
			if err := proxy.Clear(); err != nil {
				t.Fatal(err)
			}
			if !shown {
				t.Errorf("/readyz never named the model's missing tokenizer: %q", kv.readyz(t))
			}
			if !pollFor(60*time.Second, func() bool { return kv.tokenization(t) == "exact" }) {
				t.Errorf("tokenization a minute after the fault = %q, want exact", kv.tokenization(t))
			}
			stop()
			done.Wait()
			failures, lats := loop.take()
			warns := kv.warns.faultWarns(0)
			t.Logf("%d decisions, p99 %v, %d WARN lines", len(lats), p99Of(lats), len(warns))
			for _, f := range failures {
				t.Errorf("failed: %s", f)
			}
			if p99 := p99Of(lats); p99 > decisionBound {
				t.Errorf("decision p99 %v, want <= %v", p99, decisionBound)
			}
			if len(warns) > 4 {
				t.Errorf("%d WARN lines for one fault, want <= 4:\n%s", len(warns), strings.Join(warns, "\n"))
			}
		})
	}
}
