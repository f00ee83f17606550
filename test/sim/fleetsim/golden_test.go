package fleetsim

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/decisions.golden from this build's runs")

const goldenFile = "testdata/decisions.golden"

// goldenRun is one fixed run of the real router whose decisions the golden
// file pins.
type goldenRun struct {
	name   string
	policy string
	setup  func(t *testing.T) (Config, *Workload)
}

// goldenRuns exercise every stage of the routing pipeline at fixed seeds:
// shared prefixes (cost, tolerance, placement, homes, speculation), users
// past the caches (kvrouter's queue and expiring blocks), a prefill/decode
// fleet, and pods of two speeds (learned prefill speeds).
var goldenRuns = []goldenRun{
	{"shared-prefix seed 7", "kvrouter", func(t *testing.T) (Config, *Workload) { return tinySharedPrefix(t, 7, 3) }},
	{"shared-prefix seed 8", "kvrouter", func(t *testing.T) (Config, *Workload) { return tinySharedPrefix(t, 8, 3) }},
	{"cache-overload seed 1", "kvrouter", cacheOverload},
	{"prefill/decode seed 3", "kvrouter", func(t *testing.T) (Config, *Workload) {
		cfg, w := tinySharedPrefix(t, 3, 2)
		cfg.Roles = []kvpod.Role{kvpod.RolePrefill, kvpod.RoleDecode, kvpod.RoleDecode, kvpod.RoleDecode}
		return cfg, w
	}},
	{"heterogeneous speeds seed 1", "kvrouter-learned", func(t *testing.T) (Config, *Workload) { return twoSpeedFleet(t, 1) }},
}

// cacheOverload is users who each re-send one prompt, more of them than
// the pods' caches hold, under a client keeping 160 requests in flight.
func cacheOverload(t *testing.T) (Config, *Workload) {
	t.Helper()
	return overloadFleet(t, "cache-overload", []float64{8, 20}, 20)
}

// overloadFleet is llm-d's cache-overload runs shortened to stages of the
// given rates and seconds: 60 users of 3,756-token prompts over 4 pods of
// 40,000 KV tokens, each the published runs' Llama-3.1-70B on two GPUs as
// test/sim/cmd/fleetsim's overloadPod derives it.
func overloadFleet(t *testing.T, name string, stages []float64, seconds float64) (Config, *Workload) {
	t.Helper()
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sp := SharedPrefix{Groups: 60, PerGroup: 1, System: 3500, Question: 256, Output: 20, Stages: stages, StageSeconds: seconds, QPSScale: 1, Constant: true, Seed: 1}
	cfg := DefaultConfig()
	cfg.Pods, cfg.Blocks, cfg.StepTokens = 4, 40_000/cfg.BlockSize, 2048
	ratio := 70.6 / 2 / 8.03
	cfg.PrefillTokensPerSecond = 25_000 * 8.03 / 70.6 * 2
	cfg.StepOverhead = time.Duration(float64(5500*time.Microsecond) * ratio)
	cfg.DecodePerSequence = time.Duration(float64(6*time.Microsecond) * ratio)
	cfg.KVBytesPerToken = 160 << 10
	cfg.Client = Client{Concurrency: 160, DrainStages: true}
	return cfg, sp.Generate(name, h)
}

// digest summarizes a run's outcomes: every request's pod, prefill pod,
// first token time and cache hit. Equal digests mean the router made the
// same decisions at the same moments.
func digest(res *Result) (string, float64) {
	h := sha256.New()
	var buf [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	var ttft float64
	for _, o := range res.Outcomes {
		put(uint64(o.Pod))
		put(uint64(o.Prefill))
		put(math.Float64bits(o.First))
		put(uint64(o.Hit))
		if o.Hop {
			put(1)
		}
		if o.TimedOut {
			put(2)
		}
		ttft += o.First - o.Arrival
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:12]), ttft / float64(max(len(res.Outcomes), 1))
}

// TestGoldenDecisions replays fixed runs of the simulator through the real
// router and compares their decisions with testdata/decisions.golden, so
// that a change meant to keep behavior (a restructuring) shows it does. A
// change of behavior updates the file (in test/sim: go test ./fleetsim
// -run TestGoldenDecisions -update) and says why in its commit.
func TestGoldenDecisions(t *testing.T) {
	want := map[string]string{}
	if !*updateGolden {
		f, err := os.Open(goldenFile)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, rest, ok := strings.Cut(sc.Text(), "\t"); ok {
				want[name] = rest
			}
		}
		_ = f.Close()
	}
	var lines []string
	for _, g := range goldenRuns {
		cfg, w := g.setup(t)
		res := runPolicy(t, cfg, w, g.policy)
		d, mean := digest(res)
		got := fmt.Sprintf("%s\t%d requests\t%s\tmean TTFT %.4f s", g.policy, len(res.Outcomes), d, mean)
		lines = append(lines, g.name+"\t"+got)
		if !*updateGolden && want[g.name] != got {
			t.Errorf("%s:\n got %s\nwant %s", g.name, got, want[g.name])
		}
	}
	if *updateGolden {
		if err := os.WriteFile(goldenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
