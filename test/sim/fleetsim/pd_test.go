package fleetsim

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// prompted is a workload of requests whose prompts are the given
// segments, hashed as vLLM hashes them, one level.
func prompted(t *testing.T, reqs ...Request) *Workload {
	t.Helper()
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := &Workload{BlockSize: h.BlockSize(), Hash: h.Config(), Levels: []Level{{Name: "x", End: 1e9}}}
	var toks []uint32
	for i, r := range reqs {
		r.ID = i
		toks = r.AppendTokens(toks[:0])
		r.Prompt, r.Hashes = len(toks), h.AppendHashes(nil, toks, blockhash.Extra{})
		w.Requests = append(w.Requests, r)
	}
	return w
}

// pdFleet is a prefill pod (0) and a decode pod (1).
func pdFleet() Config {
	cfg := DefaultConfig()
	cfg.Pods = 2
	cfg.Roles = []kvpod.Role{kvpod.RolePrefill, kvpod.RoleDecode}
	return cfg
}

// runKVRouter runs the kvrouter policy and returns the sim and policy too.
func runKVRouter(t *testing.T, cfg Config, w *Workload) (*Result, *Sim, *kvRouter) {
	t.Helper()
	var s *Sim
	var p *kvRouter
	res, err := Run(cfg, w, func(sim *Sim) (Policy, error) {
		var err error
		s = sim
		p, err = newKVRouter(sim)
		return p, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, s, p
}

// checkIdle fails unless every pod of s holds no block and the router
// charges no pod any load: every decision's Prefilled and Done came.
func checkIdle(t *testing.T, s *Sim, p *kvRouter) {
	t.Helper()
	for i, pd := range s.pods {
		if pd.cache.free != s.cfg.Blocks || len(pd.running)+len(pd.waiting)+len(pd.pulling) > 0 {
			t.Errorf("pod %d at the end: %d of %d blocks free, %d running, %d waiting, %d pulling; want idle",
				i, pd.cache.free, s.cfg.Blocks, len(pd.running), len(pd.waiting), len(pd.pulling))
		}
		l := p.fleet.Load(fmt.Sprintf("pod-%03d", i))
		if n, w, k := l.InFlight.Load(), l.PrefillTokens.Load(), l.Prefilling.Load(); n != 0 || w != 0 || k != 0 {
			t.Errorf("pod %d at the end: router load in flight %d, prefill tokens %d, prefilling %d; want 0", i, n, w, k)
		}
	}
}

func TestPrefillHop(t *testing.T) {
	cfg := pdFleet()
	w := prompted(t,
		Request{Arrival: 0, Output: 3, segs: []segment{{1, 1024}}},
		// the decode pod holds the first 1,024 tokens: 256 uncached, under
		// the threshold, so the decode pod computes them itself
		Request{Arrival: 10, Output: 1, segs: []segment{{1, 1024}, {2, 256}}},
		Request{Arrival: 20, Output: 1, segs: []segment{{3, 2048}}},
	)
	res, s, p := runKVRouter(t, cfg, w)
	over := cfg.StepOverhead.Seconds()
	tests := []struct {
		hop      bool
		hit      int
		transfer float64
		ttft     float64
	}{
		// the prefill pod's step, the transfer, the decode pod's step computing the last token
		{true, 0, cfg.transferSeconds(1024), over + cfg.prefillSeconds(0, 1024) + cfg.transferSeconds(1024) + over + cfg.prefillSeconds(1023, 1)},
		{false, 64, 0, over + cfg.prefillSeconds(1024, 256)},
		{true, 0, cfg.transferSeconds(2048), over + cfg.prefillSeconds(0, 2048) + cfg.transferSeconds(2048) + over + cfg.prefillSeconds(2047, 1)},
	}
	for i, tt := range tests {
		o := res.Outcomes[i]
		if o.Pod != 1 || o.Hop != tt.hop || o.Hop && o.Prefill != 0 || o.Hit != tt.hit || !near(o.Transfer, tt.transfer) || !near(o.First-o.Arrival, tt.ttft) {
			t.Errorf("request %d: pod %d, hop %v from %d, hit %d, transfer %.6f, TTFT %.6f; want pod 1, hop %v from 0, hit %d, transfer %.6f, TTFT %.6f",
				i, o.Pod, o.Hop, o.Prefill, o.Hit, o.Transfer, o.First-o.Arrival, tt.hop, tt.hit, tt.transfer, tt.ttft)
		}
	}
	for k, h := range w.Requests[2].Hashes {
		if !s.pods[1].cache.has(h) || !s.pods[0].cache.has(h) {
			t.Fatalf("block %d of a hopped prompt: cached on the prefill pod %v, the decode pod %v; want both",
				k, s.pods[0].cache.has(h), s.pods[1].cache.has(h))
		}
	}
	if s.pods[0].cache.has(w.Requests[1].Hashes[64]) {
		t.Error("the prefill pod caches a block of a request it did not compute")
	}
	checkIdle(t, s, p)
}

// TestPrefillHopThreshold checks that the router's threshold decides the
// hop: never at ∞, the decode pod computing the prompt as an aggregated
// pod would.
func TestPrefillHopThreshold(t *testing.T) {
	w := prompted(t, Request{Output: 2, segs: []segment{{1, 1024}}})
	for _, tt := range []struct {
		threshold int
		hop       bool
	}{{0, true}, {1024, true}, {1025, false}, {math.MaxInt, false}} {
		cfg := pdFleet()
		cfg.PDThreshold = tt.threshold
		res, s, p := runKVRouter(t, cfg, w)
		if o := res.Outcomes[0]; o.Hop != tt.hop || o.Pod != 1 {
			t.Errorf("threshold %d: hop %v, pod %d; want hop %v, pod 1", tt.threshold, o.Hop, o.Pod, tt.hop)
		}
		checkIdle(t, s, p)
	}
}

// TestPrefillHopCanceled cancels a request on its prefill pod and
// another while its KV is on its way: both pods end with every block free.
func TestPrefillHopCanceled(t *testing.T) {
	cfg := pdFleet()
	cfg.KVLinkBandwidth = 1024 * cfg.KVBytesPerToken // a second per 1,024 tokens
	cfg.Client.Timeout = 500 * time.Millisecond
	w := prompted(t,
		Request{Arrival: 0, Output: 2, segs: []segment{{1, 16_384}}}, // prefill ~0.8 s
		Request{Arrival: 10, Output: 2, segs: []segment{{2, 1024}}},  // prefill ~0.05 s, transfer 1 s
	)
	res, s, p := runKVRouter(t, cfg, w)
	for i, o := range res.Outcomes {
		if !o.TimedOut || !o.Hop || o.First != 0 {
			t.Errorf("request %d: timed out %v, hop %v, first token %v; want timed out, hop, no token", i, o.TimedOut, o.Hop, o.First)
		}
	}
	if s.pods[1].cache.has(w.Requests[1].Hashes[0]) {
		t.Error("the decode pod caches a block whose transfer was canceled")
	}
	checkIdle(t, s, p)
}

func TestPrefillHopDeterministic(t *testing.T) {
	cfg, w := tinySharedPrefix(t, 7, 2)
	cfg.Roles = []kvpod.Role{kvpod.RolePrefill, kvpod.RoleDecode, kvpod.RolePrefill, kvpod.RoleDecode}
	cfg.PDThreshold = 256
	a, b := runPolicy(t, cfg, w, "kvrouter"), runPolicy(t, cfg, w, "kvrouter")
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two P/D runs with seed %d differ", cfg.Seed)
	}
	hops := 0
	for i, o := range a.Outcomes {
		if o.Finish == 0 || cfg.Roles[o.Pod] == kvpod.RolePrefill || o.Hop && cfg.Roles[o.Prefill] != kvpod.RolePrefill {
			t.Fatalf("request %d: pod %d, hop %v from %d, finish %v; want a decode pod, from a prefill pod, finished", i, o.Pod, o.Hop, o.Prefill, o.Finish)
		}
		if o.Hop {
			hops++
		}
	}
	if hops == 0 || hops == len(a.Outcomes) {
		t.Fatalf("%d of %d requests hopped; want some (the cold prompts), not all (the decode pod holds the shared prefixes)", hops, len(a.Outcomes))
	}
}

// TestPrefillPodsNeedARouter refuses a P/D fleet to a policy that names
// no prefill pods.
func TestPrefillPodsNeedARouter(t *testing.T) {
	np, err := PolicyByName("least-loaded")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(pdFleet(), prompted(t, Request{Output: 1, segs: []segment{{1, 64}}}), np); err == nil {
		t.Error("Run(P/D fleet, least-loaded) = nil error, want a refusal")
	}
}

func TestConfigValidateRoles(t *testing.T) {
	p, d := kvpod.RolePrefill, kvpod.RoleDecode
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr bool
	}{
		{"no roles", func(c *Config) { c.Roles = nil }, false},
		{"prefill and decode", func(*Config) {}, false},
		{"prefill and both", func(c *Config) { c.Roles = []kvpod.Role{p, kvpod.RoleBoth} }, false},
		{"a role short", func(c *Config) { c.Roles = []kvpod.Role{p} }, true},
		{"unknown role", func(c *Config) { c.Roles = []kvpod.Role{p, "both"} }, true},
		{"prefill only", func(c *Config) { c.Roles = []kvpod.Role{p, p} }, true},
		{"no link", func(c *Config) { c.KVLinkBandwidth = 0 }, true},
		{"no link, no prefill", func(c *Config) { c.Roles, c.KVLinkBandwidth = []kvpod.Role{d, d}, 0 }, false},
		{"negative latency", func(c *Config) { c.KVLinkLatency = -time.Millisecond }, true},
		{"negative threshold", func(c *Config) { c.Roles, c.PDThreshold = nil, -1 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pdFleet()
			tt.edit(&cfg)
			if err := cfg.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate(roles %q) = %v, want error %v", cfg.Roles, err, tt.wantErr)
			}
		})
	}
}
