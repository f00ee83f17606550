package kvindex

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func mustNew(t testing.TB, cfg Config, reg prometheus.Registerer) *Index {
	t.Helper()
	x, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	bad := Config{Shards: 3, MaxEntries: 0, SpeculativeTTL: -time.Second, SpeculativeGrace: time.Second}
	err := bad.Validate()
	for _, want := range []string{"shards = 3", "max_entries: 0, want in", "speculative TTL = -1s", "speculative grace = 1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want it to mention %q", bad, err, want)
		}
	}
	if _, err := New(bad, nil); err == nil {
		t.Errorf("New(%+v) = nil error, want one", bad)
	}
}

func TestBadInput(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	pod := x.AddPod("a", "m")
	for name, err := range map[string]error{
		"stored unknown pod":  x.Stored(PodID(99), TierGPU, []uint64{1}),
		"removed unknown pod": x.Removed(PodID(99), TierGPU, []uint64{1}),
		"speculate unknown":   x.Speculate(PodID(99), []uint64{1}),
		"settle unknown":      x.Settle(PodID(99), []uint64{1}),
		"clear unknown":       x.ClearPod(PodID(99)),
		"remove unknown":      x.RemovePod(PodID(99)),
	} {
		if !errors.Is(err, ErrUnknownPod) {
			t.Errorf("%s = %v, want ErrUnknownPod", name, err)
		}
	}
	if err := x.Stored(pod, Tier(9), []uint64{1}); !errors.Is(err, ErrBadTier) {
		t.Errorf("Stored(tier 9) = %v, want ErrBadTier", err)
	}
	if err := x.ClearTier(pod, Tier(NumTiers)); !errors.Is(err, ErrBadTier) {
		t.Errorf("ClearTier(NumTiers) = %v, want ErrBadTier", err)
	}
	// Removing what is absent, twice, never drives a count negative.
	for range 2 {
		if err := x.Removed(pod, TierGPU, []uint64{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	mustStore(t, x, pod, TierGPU, 1)
	if got := x.Match("m", []uint64{1}, []PodID{pod}, nil)[0].Blocks; got != 1 {
		t.Errorf("after absent removals and one store, Match = %d blocks, want 1", got)
	}
	if err := x.Stored(pod, TierGPU, nil); err != nil {
		t.Errorf("Stored(no hashes) = %v, want nil", err)
	}
}

func mustStore(t testing.TB, x *Index, pod PodID, tier Tier, hs ...uint64) {
	t.Helper()
	if err := x.Stored(pod, tier, hs); err != nil {
		t.Fatal(err)
	}
}

func TestRepeatedStoreCounts(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	pod := x.AddPod("a", "m")
	mustStore(t, x, pod, TierGPU, 7, 7)
	if err := x.Removed(pod, TierGPU, []uint64{7}); err != nil {
		t.Fatal(err)
	}
	if got := x.Match("m", []uint64{7}, []PodID{pod}, nil)[0].Blocks; got != 1 {
		t.Fatalf("stored twice, removed once: Match = %d blocks, want 1", got)
	}
	if err := x.Removed(pod, TierGPU, []uint64{7}); err != nil {
		t.Fatal(err)
	}
	if got := x.Match("m", []uint64{7}, []PodID{pod}, nil)[0].Blocks; got != 0 {
		t.Fatalf("stored twice, removed twice: Match = %d blocks, want 0", got)
	}
}

func TestNamespacesNeverShare(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	a, b := x.AddPod("a", "llama"), x.AddPod("b", "qwen")
	mustStore(t, x, a, TierGPU, 1, 2)
	mustStore(t, x, b, TierGPU, 1, 2)
	got := x.Match("qwen", []uint64{1, 2}, []PodID{a, b}, nil)
	if got[0].Blocks != 0 || got[1].Blocks != 2 {
		t.Fatalf("Match(qwen) = %+v, want pod a (llama) 0 blocks, pod b 2", got)
	}
	// The same name re-added for another model starts empty under a new ID.
	a2 := x.AddPod("a", "qwen")
	if a2 == a {
		t.Fatalf("AddPod(a, qwen) reused ID %d of the llama pod", a)
	}
	if got := x.Match("llama", []uint64{1}, []PodID{a}, nil)[0].Blocks; got != 0 {
		t.Fatalf("old handle of re-added pod still matches %d blocks", got)
	}
	if err := x.Stored(a, TierGPU, []uint64{1}); !errors.Is(err, ErrUnknownPod) {
		t.Fatalf("Stored on the retired handle = %v, want ErrUnknownPod", err)
	}
}

func TestEvictionLeastRecentlyStoredFirst(t *testing.T) {
	reg := prometheus.NewRegistry()
	x := mustNew(t, Config{Shards: 1, MaxEntries: 4, SpeculativeTTL: time.Second}, reg)
	pod := x.AddPod("a", "m")
	mustStore(t, x, pod, TierGPU, 1, 2, 3, 4)
	mustStore(t, x, pod, TierGPU, 1)    // refreshes 1: 2 is now the oldest
	mustStore(t, x, pod, TierGPU, 5, 6) // evicts 2 then 3
	for h, want := range map[uint64]int{1: 1, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1} {
		if got := x.Match("m", []uint64{h}, []PodID{pod}, nil)[0].Blocks; got != want {
			t.Errorf("after eviction, block %d matched = %d, want %d", h, got, want)
		}
	}
	if got := metricValue(t, reg, "kvrouter_kvindex_evicted_total"); got != 2 {
		t.Errorf("evicted_total = %v, want 2", got)
	}
	if r, _ := x.Len(); r != 4 {
		t.Errorf("Len() = %d, want the bound 4", r)
	}
}

func TestEvictionAcrossPods(t *testing.T) {
	x := mustNew(t, Config{Shards: 1, MaxEntries: 4, SpeculativeTTL: time.Second}, nil)
	a, b := x.AddPod("a", "m"), x.AddPod("b", "m")
	mustStore(t, x, a, TierGPU, 1)
	mustStore(t, x, b, TierGPU, 1, 2)
	mustStore(t, x, a, TierCPU, 3)
	mustStore(t, x, b, TierGPU, 4) // evicts a's GPU 1, the oldest entry
	mustStore(t, x, a, TierGPU, 5) // evicts b's 1
	want := map[PodID][]int{a: {0, 0, 1, 0, 1}, b: {0, 1, 0, 1, 0}}
	for pod, blocks := range want {
		for i, w := range blocks {
			if got := x.Match("m", []uint64{uint64(i + 1)}, []PodID{pod}, nil)[0].Blocks; got != w {
				t.Errorf("pod %d block %d matched = %d, want %d", pod, i+1, got, w)
			}
		}
	}
	checkInvariants(t, x)
}

func TestSpeculative(t *testing.T) {
	now := time.Unix(0, 0)
	cfg := Config{Shards: 4, MaxEntries: 100, SpeculativeTTL: 2 * time.Second, Now: func() time.Time { return now }}
	x := mustNew(t, cfg, nil)
	a, b := x.AddPod("a", "m"), x.AddPod("b", "m")
	mustStore(t, x, b, TierCPU, 1)
	if err := x.Speculate(a, []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	got := x.Match("m", []uint64{1, 2, 3, 4}, []PodID{a, b}, nil)
	want := []PodMatch{{Pod: a, Blocks: 3, Speculative: 3}, {Pod: b, Blocks: 1, Tiers: [NumTiers]int{0, 1, 0, 0}}}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Match after Speculate = %+v, want %+v", got, want)
	}
	// The pod's own event confirms block 1: real, no longer speculative.
	mustStore(t, x, a, TierGPU, 1)
	if got := x.Match("m", []uint64{1, 2, 3}, []PodID{a}, nil)[0]; got.Tiers[TierGPU] != 1 || got.Speculative != 2 {
		t.Fatalf("after confirming block 1: %+v, want 1 GPU + 2 speculative", got)
	}
	now = now.Add(2 * time.Second)
	if got := x.Match("m", []uint64{1, 2, 3}, []PodID{a}, nil)[0]; got.Blocks != 1 || got.Speculative != 0 {
		t.Fatalf("after the TTL: %+v, want only the confirmed block", got)
	}
	x.Sweep()
	if _, s := x.Len(); s != 0 {
		t.Fatalf("after Sweep, %d speculative entries remain, want 0", s)
	}
}

func TestClearPodAndTier(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	a, b := x.AddPod("a", "m"), x.AddPod("b", "m")
	hs := []uint64{10, 11, 12, 13}
	mustStore(t, x, a, TierGPU, hs...)
	mustStore(t, x, a, TierCPU, hs...)
	mustStore(t, x, b, TierGPU, hs...)
	if got := x.PodEntries(a); got != 8 {
		t.Fatalf("PodEntries(a) = %d, want 8", got)
	}
	if err := x.ClearTier(a, TierGPU); err != nil {
		t.Fatal(err)
	}
	if got := x.Match("m", hs, []PodID{a}, nil)[0]; got.Blocks != 4 || got.Tiers[TierCPU] != 4 {
		t.Fatalf("after clearing a's GPU tier: %+v, want 4 blocks on CPU", got)
	}
	if err := x.ClearPod(a); err != nil {
		t.Fatal(err)
	}
	if got := x.PodEntries(a); got != 0 {
		t.Fatalf("PodEntries(a) after ClearPod = %d, want 0", got)
	}
	if got := x.PodEntries(b); got != 4 {
		t.Fatalf("PodEntries(b) after clearing a = %d, want 4", got)
	}
	if err := x.RemovePod(b); err != nil {
		t.Fatal(err)
	}
	if r, _ := x.Len(); r != 0 {
		t.Fatalf("Len() after removing every pod = %d, want 0", r)
	}
	if _, ok := x.Pod("b"); ok {
		t.Fatal("Pod(b) still found after RemovePod")
	}
}

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	x := mustNew(t, DefaultConfig(), reg)
	pod := x.AddPod("a", "m")
	mustStore(t, x, pod, TierGPU, 1, 2, 3)
	x.Match("m", []uint64{1, 2, 4}, []PodID{pod}, nil)
	for name, want := range map[string]float64{
		"kvrouter_kvindex_entries":                      3,
		"kvrouter_kvindex_pods":                         1,
		"kvrouter_kvindex_stored_total":                 3,
		"kvrouter_kvindex_match_blocks_requested_total": 3,
		"kvrouter_kvindex_match_blocks_matched_total":   2,
	} {
		if got := metricValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if _, err := New(DefaultConfig(), reg); err == nil {
		t.Error("a second index on the same registry = nil error, want a duplicate registration error")
	}
}

func TestParseTier(t *testing.T) {
	for in, want := range map[string]Tier{"": TierGPU, "GPU": TierGPU, "cpu": TierCPU, "STORAGE": TierDisk, "tape": TierOther} {
		if got := ParseTier(in); got != want {
			t.Errorf("ParseTier(%q) = %v, want %v", in, got, want)
		}
	}
}

// metricValue gathers reg and returns the value of the unlabeled counter or
// gauge name, failing the test when it is not registered.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestPodIndexReuse(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	a := x.AddPod("a", "m")
	mustStore(t, x, a, TierGPU, 1, 2, 3)
	if err := x.RemovePod(a); err != nil {
		t.Fatal(err)
	}
	b := x.AddPod("b", "m")
	if b.index() != a.index() {
		t.Fatalf("AddPod after RemovePod took index %d, want the freed %d", b.index(), a.index())
	}
	if got := x.Match("m", []uint64{1, 2, 3}, []PodID{a, b}, nil); got[0].Blocks != 0 || got[1].Blocks != 0 {
		t.Fatalf("Match after reuse = %+v, want nothing for the stale handle or the new pod", got)
	}
	if err := x.Stored(a, TierGPU, []uint64{4}); !errors.Is(err, ErrUnknownPod) {
		t.Fatalf("Stored on the stale handle = %v, want ErrUnknownPod", err)
	}
	if name := x.PodName(a); name != "" {
		t.Fatalf("PodName(stale) = %q, want empty", name)
	}
	checkInvariants(t, x)
}

func TestRepeatedStoreSaturates(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	pod := x.AddPod("a", "m")
	for range countMax + 10 {
		mustStore(t, x, pod, TierGPU, 9)
	}
	for range countMax - 1 {
		if err := x.Removed(pod, TierGPU, []uint64{9}); err != nil {
			t.Fatal(err)
		}
	}
	if got := x.Match("m", []uint64{9}, []PodID{pod}, nil)[0].Blocks; got != 1 {
		t.Fatalf("after %d stores and %d removals: %d blocks, want 1 (the count saturates at %d)", countMax+10, countMax-1, got, countMax)
	}
	if err := x.Removed(pod, TierGPU, []uint64{9}); err != nil {
		t.Fatal(err)
	}
	if got := x.Match("m", []uint64{9}, []PodID{pod}, nil)[0].Blocks; got != 0 {
		t.Fatalf("after the saturated count is removed: %d blocks, want 0", got)
	}
}

func TestEntries(t *testing.T) {
	x, err := New(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := x.AddPod("a", "m"), x.AddPod("b", "m")
	for _, op := range []error{
		x.Stored(a, TierGPU, []uint64{1, 2, 3}),
		x.Stored(a, TierGPU, []uint64{2}),
		x.Stored(a, TierCPU, []uint64{3}),
		x.Stored(b, TierGPU, []uint64{9}),
		x.Speculate(a, []uint64{7}),
	} {
		if op != nil {
			t.Fatal(op)
		}
	}
	type entry struct {
		h     uint64
		tier  Tier
		count int
	}
	got := map[entry]bool{}
	if err := x.Entries(a, func(h uint64, tier Tier, count int) { got[entry{h, tier, count}] = true }); err != nil {
		t.Fatal(err)
	}
	want := map[entry]bool{{1, TierGPU, 1}: true, {2, TierGPU, 2}: true, {3, TierGPU, 1}: true, {3, TierCPU, 1}: true}
	if !maps.Equal(got, want) {
		t.Errorf("Entries(a) = %v, want %v", got, want)
	}
	if err := x.RemovePod(a); err != nil {
		t.Fatal(err)
	}
	if err := x.Entries(a, func(uint64, Tier, int) { t.Error("a removed pod has entries") }); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("Entries(removed) = %v, want ErrUnknownPod", err)
	}
}

// TestHolds: a pod holds a block stored in any tier until it is removed;
// speculation, another pod's block and a stale handle hold nothing.
func TestHolds(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	a, b := x.AddPod("a", "m"), x.AddPod("b", "m")
	mustStore(t, x, a, TierGPU, 1)
	mustStore(t, x, a, TierCPU, 2)
	mustStore(t, x, b, TierGPU, 3)
	if err := x.Speculate(a, []uint64{3, 4}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pod  PodID
		hash uint64
		want bool
	}{{a, 1, true}, {a, 2, true}, {a, 3, false}, {a, 4, false}, {b, 3, true}, {b, 1, false}, {a, 5, false}} {
		if got := x.Holds(c.pod, c.hash); got != c.want {
			t.Errorf("Holds(%v, %d) = %v, want %v", c.pod, c.hash, got, c.want)
		}
	}
	if err := x.Removed(a, TierGPU, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	if x.Holds(a, 1) {
		t.Error("Holds(a, 1) after its removal = true, want false")
	}
	if err := x.RemovePod(b); err != nil {
		t.Fatal(err)
	}
	c := x.AddPod("c", "m") // b's index, reused
	mustStore(t, x, c, TierGPU, 3)
	if x.Holds(b, 3) {
		t.Error("Holds(stale b, 3) = true, want false")
	}
	if !x.Holds(c, 3) {
		t.Error("Holds(c, 3) = false, want true")
	}
}

// TestHoldersOverflow: a block holds at most MaxHolders holders; a store
// or a speculation by one pod more is ignored, the index stays whole, and
// the block keeps its holders.
func TestHoldersOverflow(t *testing.T) {
	x := mustNew(t, DefaultConfig(), nil)
	const h = 0x1234
	pods := make([]PodID, MaxHolders+1)
	for i := range pods {
		pods[i] = x.AddPod(fmt.Sprintf("pod-%d", i), "m")
	}
	for _, p := range pods[:MaxHolders] {
		mustStore(t, x, p, TierGPU, h)
	}
	last := pods[MaxHolders]
	mustStore(t, x, last, TierGPU, h)
	if err := x.Speculate(last, []uint64{h}); err != nil {
		t.Fatal(err)
	}
	if x.Holds(last, h) || !x.Holds(pods[0], h) || !x.Holds(pods[MaxHolders-1], h) {
		t.Errorf("with %d holders: the one more holds %v, the first %v, the last admitted %v", MaxHolders, x.Holds(last, h), x.Holds(pods[0], h), x.Holds(pods[MaxHolders-1], h))
	}
	if n, _ := x.Len(); n != MaxHolders {
		t.Errorf("Len() = %d, want %d", n, MaxHolders)
	}
	checkInvariants(t, x)
}
