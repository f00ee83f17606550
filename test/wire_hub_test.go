package test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/toxiproxy"
	"github.com/kvrouter/kvrouter/tokenizer/hubtest"
)

// TestWireFaultsHub: the kvrouter binary downloads its pods' tokenizer
// from a hub behind toxiproxy that resets, stalls or drips at 10 KB/s.
// Meanwhile the model is routed by load (no request fails, p99 under
// decisionBound) and /readyz names its missing tokenizer; each download is
// bounded by --hub-timeout. Once the wire heals the download is retried by
// itself and the model is tokenized exactly.
func TestWireFaultsHub(t *testing.T) {
	dir := qwen3Dir(t)
	files := map[string][]byte{}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	hub := hubtest.New(t, "hub-secret", map[string]map[string][]byte{hubModel: files})
	u, err := url.Parse(hub.URL)
	if err != nil {
		t.Fatal(err)
	}
	tp := toxiproxy.New(t)
	proxy, err := tp.Proxy("hub", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("hub-secret\n"), 0o600); err != nil {
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
			var mu sync.Mutex
			var failures []string
			var lats []time.Duration
			ctx, stop := context.WithCancel(context.Background())
			var done sync.WaitGroup
			done.Go(func() {
				for ctx.Err() == nil {
					start := time.Now()
					res, err := kv.envoy.Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{100}})
					mu.Lock()
					switch {
					case ctx.Err() != nil:
					case err != nil:
						failures = append(failures, err.Error())
					case res.Status != 200:
						failures = append(failures, fmt.Sprintf("routing = %d %s", res.Status, res.Details))
					default:
						lats = append(lats, time.Since(start))
					}
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
				}
			})
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
