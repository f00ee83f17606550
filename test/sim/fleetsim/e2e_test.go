package fleetsim

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// tinySharedPrefix is the llm-d shared-prefix benchmark shrunk to run in
// about a second per policy under -race: 4 pods, prompts a quarter as
// long, stages of the given seconds.
func tinySharedPrefix(t *testing.T, seed uint64, seconds float64) (Config, *Workload) {
	t.Helper()
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sp := SharedPrefix{
		Groups: 16, PerGroup: 5, System: 1500, Question: 300, Output: 10,
		WarmupQPS: 20, Warmup: seconds, Stages: []float64{20, 80}, StageSeconds: seconds, QPSScale: 1, Seed: seed,
	}
	cfg := DefaultConfig()
	cfg.Pods, cfg.Seed = 4, seed
	cfg.Blocks = int(float64(sp.WorkingSet()) / 0.73 / float64(cfg.Pods*cfg.BlockSize))
	return cfg, sp.Generate("tiny", h)
}

func runPolicy(t *testing.T, cfg Config, w *Workload, name string) *Result {
	t.Helper()
	np, err := PolicyByName(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(cfg, w, np)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestDeterministic(t *testing.T) {
	cfg, w := tinySharedPrefix(t, 7, 2)
	for _, name := range Policies {
		t.Run(name, func(t *testing.T) {
			a, b := runPolicy(t, cfg, w, name), runPolicy(t, cfg, w, name)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("two runs of %s with seed %d differ", name, cfg.Seed)
			}
			if a.Dropped != 0 || len(a.Outcomes) != len(w.Requests) {
				t.Fatalf("%s: %d dropped, %d outcomes of %d requests", name, a.Dropped, len(a.Outcomes), len(w.Requests))
			}
		})
	}
	cfg2, w2 := tinySharedPrefix(t, 8, 2)
	if reflect.DeepEqual(runPolicy(t, cfg, w, "random"), runPolicy(t, cfg2, w2, "random")) {
		t.Fatal("seeds 7 and 8 gave identical random runs")
	}
}

// TestSharedPrefixOrdering checks the published shape on the tiny
// benchmark: at the top stage the fleet drowns in prefill under the
// cache-blind policies, while the cache-aware ones keep hitting and stay
// fast.
func TestSharedPrefixOrdering(t *testing.T) {
	cfg, w := tinySharedPrefix(t, 1, 5)
	bound := BoundHits(w, cfg.Pods*cfg.Blocks)
	top := map[string]Stats{}
	for _, name := range Policies {
		st := Summarize(w, runPolicy(t, cfg, w, name), bound)
		top[name] = st[len(w.Levels)-1]
		t.Logf("%-12s top stage: p90 %.3fs, hit ratio %.2f (bound %.2f)", name, top[name].P90, top[name].HitRatio, top[name].BoundRatio)
	}
	for _, aware := range []string{"kvrouter", "oracle"} {
		for _, blind := range []string{"random", "round-robin", "least-loaded"} {
			if a, b := top[aware], top[blind]; a.P90 > b.P90/10 || a.HitRatio < b.HitRatio+0.3 {
				t.Errorf("top stage: %s p90 %.3fs hit %.2f, %s p90 %.3fs hit %.2f; want a tenth of the p90 and 0.3 more hits",
					aware, a.P90, a.HitRatio, blind, b.P90, b.HitRatio)
			}
		}
	}
	// llm-d's precise scheduler reads the same events but keeps no
	// speculative entries: a group's requests that come before its first
	// prompt's blocks are reported spread by load. It still hits more than
	// every cache-blind policy.
	for _, blind := range []string{"random", "round-robin", "least-loaded"} {
		if p, b := top["llm-d-precise"], top[blind]; p.HitRatio <= b.HitRatio {
			t.Errorf("top stage hit ratio: llm-d-precise %.2f, %s %.2f; want more", p.HitRatio, blind, b.HitRatio)
		}
	}
	if k, o := top["kvrouter"], top["oracle"]; k.HitRatio < 0.9*o.HitRatio {
		t.Errorf("top stage hit ratio: kvrouter %.2f, oracle %.2f; want at least 90%% of the oracle's", k.HitRatio, o.HitRatio)
	}
}

func TestPolicyByName(t *testing.T) {
	for _, name := range Policies {
		if _, err := PolicyByName(name); err != nil {
			t.Errorf("PolicyByName(%q) = %v, want a policy", name, err)
		}
	}
	if _, err := PolicyByName("fastest"); err == nil {
		t.Error("PolicyByName(\"fastest\") = nil error, want unknown policy")
	}
}
