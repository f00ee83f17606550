package main

import (
	"context"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/test/sim/fleetsim"
)

func TestParseOutputs(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"1000,230", []int{1000, 230}, false},
		{" 230 ", []int{230}, false},
		{"", nil, true},
		{"1000,", nil, true},
		{"0", nil, true},
		{"ten", nil, true},
	}
	for _, tt := range tests {
		got, err := parseOutputs(tt.in)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseOutputs(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestSharedFleetIsHalfThePublished: shared-prefix runs half the
// published fleet of the published pods (Qwen3-32B on two H100s, derived
// from the 8B constants) under half its load, each output length as its
// own shared-prefix, its seed repeats, shared-prefix-overload and
// shared-prefix-overload at larger working sets; the working set stays
// 73% of the fleet's KV, shared-prefix-overload's is 1.25× and its
// sweep's as named.
func TestSharedFleetIsHalfThePublished(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := options{outputs: "1000,230", qpsScale: sharedQPSScale, seed: 1, seeds: 3, client: "inference-perf", concurrency: defaultConcurrency(sharedQPSScale), timeout: ipTimeout}
	var scs []*scenario
	for _, output := range []int{1000, 230} {
		scs = append(scs, sharedScenarios(o, h, fleetsim.DefaultConfig(), output)...)
	}
	if want := 2 * (3 + 3*(1+len(overloadSweep))); len(scs) != want {
		t.Fatalf("%d scenarios, want shared-prefix, 2 repeats, shared-prefix-overload and its sweep, each with 2 repeats, for each of 2 output lengths: %d", len(scs), want)
	}
	for i, sc := range scs {
		if sc.group == sharedPrefixOverload && sc.base == nil { // kvrouter and precise again under seeds 2 and 3
			for k, rep := range scs[i+1 : i+3] {
				if rep.base != sc || rep.cfg.Seed != uint64(2+k) || !slices.Equal(rep.only, []string{"llm-d-precise", "kvrouter"}) || rep.groups != sc.groups {
					t.Errorf("%s: repeat %d is %s, seed %d, %v; want its repeat under seed %d for precise and kvrouter", sc.w.Name, k, rep.w.Name, rep.cfg.Seed, rep.only, 2+k)
				}
			}
		}
		sweep := sc.sweep || sc.base != nil && sc.base.sweep
		c := sc.cfg
		if c.Pods != 4 || c.Blocks != 19_208 || math.Abs(c.PrefillTokensPerSecond-12_241) > 1 || c.StepOverhead.Round(100*time.Microsecond) != 11200*time.Microsecond {
			t.Fatalf("%s: %d pods of %d blocks, prefill %.0f tokens/s, step %v; want 4 of 19,208, 12,241, 11.2ms",
				sc.w.Name, c.Pods, c.Blocks, c.PrefillTokensPerSecond, c.StepOverhead)
		}
		capacity := float64(c.Pods * c.Blocks * c.BlockSize)
		want := map[string]float64{sharedPrefix: 0.73, sharedPrefixOverload: 1.25}[sc.group]
		if !sweep && sc.share != want {
			t.Errorf("%s: share %v, want %v", sc.w.Name, sc.share, want)
		}
		var tokens float64
		seen := map[uint64]bool{}
		for _, r := range sc.w.Requests {
			if !seen[r.Hashes[len(r.Hashes)-1]] {
				seen[r.Hashes[len(r.Hashes)-1]] = true
				tokens += float64(r.Prompt)
			}
			if r.Output != sc.output {
				t.Fatalf("%s: a request of %d output tokens, want %d", sc.w.Name, r.Output, sc.output)
			}
		}
		if sweep { // the groups the share asks for; the client sends what its stages reach
			if g := int(sc.share*capacity/12_000 + 0.5); sc.groups != g {
				t.Errorf("%s: %d groups, want %d", sc.w.Name, sc.groups, g)
			}
			if s := sentShare(sc); s < 1.25 || s > sc.share {
				t.Errorf("%s: sends a working set of %.2f of the fleet's KV, want 1.25 to %v", sc.w.Name, s, sc.share)
			}
			continue
		}
		share := (tokens - float64(len(seen)/5)*6000*4) / capacity // distinct prompts share their group's system prompt
		if math.Abs(share-want) > 0.02 {
			t.Errorf("%s: working set %.2f of the fleet's KV, want %.2f", sc.w.Name, share, want)
		}
	}
}

// TestSeedsRepeatTheAcceptanceRuns: -seeds N repeats shared-prefix's and
// shared-prefix-overload's acceptance runs under the N−1 seeds after
// -seed, and fewer than one is refused.
func TestSeedsRepeatTheAcceptanceRuns(t *testing.T) {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := options{qpsScale: sharedQPSScale, seed: 7, seeds: 5, quick: true, client: "inference-perf", timeout: ipTimeout}
	var got []uint64
	for _, sc := range sharedScenarios(o, h, fleetsim.DefaultConfig(), 230) {
		if sc.group == sharedPrefix && sc.base != nil {
			got = append(got, sc.cfg.Seed)
		}
	}
	if want := []uint64{8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Errorf("shared-prefix repeats under seeds %v, want %v", got, want)
	}
	if err := run(context.Background(), []string{"-seeds", "0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-seeds 0") {
		t.Errorf("-seeds 0: %v, want it refused", err)
	}
}
