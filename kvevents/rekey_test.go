package kvevents

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// podChain returns the hashes a pod with another root (seed "7", as a pod
// without PYTHONHASHSEED seeds its own) publishes for tokens, continuing
// from parent (nil: the root), and the digest of its last block.
func podChain(t testing.TB, parent *blockhash.Digest, tokens []uint32) ([]uint64, blockhash.Digest) {
	t.Helper()
	h, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256CBOR, Seed: "7", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	p, first := h.Root(), true
	if parent != nil {
		p, first = *parent, false
	}
	return h.Extend(nil, p, first, tokens, blockhash.Extra{})
}

// routerHashes returns what the router computes for tokens from the root:
// the fixture's configuration (sha256_cbor, seed "0", block size 16).
func routerHashes(t testing.TB, tokens []uint32) []uint64 {
	t.Helper()
	h, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256CBOR, Seed: "0", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	return h.AppendHashes(nil, tokens, blockhash.Extra{})
}

// matched returns how many leading blocks of hashes the fixture's pod holds.
func (f *applyFixture) matched(hashes []uint64) int {
	m := f.idx.Match("model", hashes, []kvindex.PodID{f.id}, nil)
	return m[0].Blocks
}

func (f *applyFixture) applyEvents(t testing.TB, events ...wire.Event) {
	t.Helper()
	if err := f.a.apply(&wire.Batch{Events: events}); err != nil {
		t.Fatal(err)
	}
}

// prompts are three token sequences of 3 blocks with no common block.
var prompts = [][]uint32{u32s(0, 48), u32s(1000, 48), u32s(2000, 48)}

// mismatchFixture is an apply fixture whose pod has published the root
// chains of prompts with its own root, which makes it mismatch (three
// failures) and rekeyed.
func mismatchFixture(t testing.TB) (*applyFixture, [][]uint64) {
	t.Helper()
	f := newApplyFixture(t)
	var pod [][]uint64
	for i, p := range prompts {
		hashes, _ := podChain(t, nil, p)
		pod = append(pod, hashes)
		if f.a.rekey.active {
			t.Fatalf("rekeyed after %d mismatching chains, want only after 3", i)
		}
		f.applyEvents(t, stored(hashes, nil, p, 16))
	}
	if f.a.verify.state != VerifyMismatch || !f.a.rekey.active {
		t.Fatalf("after 3 mismatching chains: verification %v, rekeyed %v; want mismatch, rekeyed", f.a.verify.state, f.a.rekey.active)
	}
	return f, pod
}

// TestRekeyMismatchMatches: once a pod's hashes mismatch, its entries are
// kvrouter's hashes of its blocks, those stored before the mismatch was
// concluded included, so the router's hashes of the same tokens match it;
// its own hashes are gone.
func TestRekeyMismatchMatches(t *testing.T) {
	f, pod := mismatchFixture(t)
	for i, p := range prompts {
		if got := f.matched(routerHashes(t, p)); got != 3 {
			t.Errorf("prompt %d: router's hashes match %d blocks, want 3", i, got)
		}
		if got := f.matched(pod[i]); got != 0 {
			t.Errorf("prompt %d: the pod's own hashes match %d blocks, want 0", i, got)
		}
	}
	if got := f.idx.PodEntries(f.id); got != 9 {
		t.Errorf("PodEntries = %d, want 9", got)
	}
	if got := testutil.ToFloat64(f.m.rekeyed); got != 1 {
		t.Errorf("rekeyed gauge = %v, want 1", got)
	}
	if !strings.Contains(f.log.String(), "rekeying the pod's blocks") {
		t.Errorf("no warning of the rekeying; log:\n%s", f.log)
	}
}

// TestRekeyContinuesAndRemoves: a chain continued from a rekeyed block
// resolves its parent through the map; removals by the pod's hashes remove
// kvrouter's.
func TestRekeyContinuesAndRemoves(t *testing.T) {
	f, _ := mismatchFixture(t)
	long := append(slices.Clone(prompts[0]), u32s(5000, 32)...)
	podHashes, last := podChain(t, nil, prompts[0])
	more, _ := podChain(t, &last, long[48:])
	f.applyEvents(t, stored(more, &podHashes[2], long[48:], 16))
	want := routerHashes(t, long)
	if got := f.matched(want); got != 5 {
		t.Fatalf("a continued chain: router's hashes match %d blocks, want 5", got)
	}
	// The pod evicts its last two blocks, then the one before.
	f.applyEvents(t, wire.Event{Type: wire.BlockRemoved, Hashes: more})
	if got := f.matched(want); got != 3 {
		t.Errorf("after removing 2 blocks: %d blocks match, want 3", got)
	}
	f.applyEvents(t, wire.Event{Type: wire.BlockRemoved, Hashes: podHashes[2:]})
	if got := f.matched(want); got != 2 {
		t.Errorf("after removing a third: %d blocks match, want 2", got)
	}
	// Removing again is unknown: counted, nothing else happens.
	f.applyEvents(t, wire.Event{Type: wire.BlockRemoved, Hashes: podHashes[2:]})
	if got := testutil.ToFloat64(f.m.rekeyFailed[rekeyRemovalUnknown]); got != 1 {
		t.Errorf("unresolved removals = %v, want 1", got)
	}
	if got := f.idx.PodEntries(f.id); got != 9+2-3 {
		t.Errorf("PodEntries = %d, want 8 (9, 2 stored, 3 removed)", got)
	}
}

// TestRekeyTiers: a block stored on GPU and offloaded to CPU is removed from
// each tier by its own event.
func TestRekeyTiers(t *testing.T) {
	f, pod := mismatchFixture(t)
	cpu := stored(pod[1], nil, prompts[1], 16)
	cpu.Medium = "CPU"
	f.applyEvents(t, cpu, wire.Event{Type: wire.BlockRemoved, Hashes: pod[1]})
	m := f.idx.Match("model", routerHashes(t, prompts[1]), []kvindex.PodID{f.id}, nil)
	if m[0].Blocks != 3 || m[0].Tiers[kvindex.TierCPU] != 3 {
		t.Fatalf("after the GPU copies were removed: %+v, want 3 blocks on CPU", m[0])
	}
	f.applyEvents(t, wire.Event{Type: wire.BlockRemoved, Hashes: pod[1], Medium: "CPU"})
	if got := f.matched(routerHashes(t, prompts[1])); got != 0 {
		t.Errorf("after the CPU copies were removed: %d blocks match, want 0", got)
	}
	if got := testutil.ToFloat64(f.m.rekeyFailed[rekeyRemovalUnknown]); got != 0 {
		t.Errorf("unresolved removals = %v, want 0", got)
	}
}

// TestRekeyUnresolved counts what cannot be rekeyed and stores none of it:
// a parent the map never saw, extra keys the event does not spell out,
// events without token ids or of a block size that is no multiple of
// kvrouter's.
func TestRekeyUnresolved(t *testing.T) {
	f, _ := mismatchFixture(t)
	before := f.idx.PodEntries(f.id)
	orphanParent := uint64(12345)
	orphan, _ := podChain(t, nil, u32s(7000, 32))
	opaque, _ := podChain(t, nil, u32s(8000, 48))
	withMM := stored(opaque, nil, u32s(8000, 48), 16)
	withMM.ExtraKeys = []wire.BlockExtra{{}, {Opaque: true}, {}}
	f.applyEvents(t,
		stored(orphan, &orphanParent, u32s(7000, 32), 16),
		withMM,
		stored([]uint64{1, 2}, nil, nil, 0),
		stored([]uint64{3}, nil, u32s(0, 24), 24),
	)
	for reason, want := range map[int]float64{rekeyParentMissing: 2, rekeyExtraKeys: 2, rekeyNoTokens: 2, rekeyBlockSize: 1} {
		if got := testutil.ToFloat64(f.m.rekeyFailed[reason]); got != want {
			t.Errorf("rekey failures %s = %v, want %v", rekeyReasonNames[reason], got, want)
		}
	}
	// The block before the opaque one is rekeyed; nothing else is stored.
	if got := f.idx.PodEntries(f.id); got != before+1 {
		t.Errorf("PodEntries = %d, want %d", got, before+1)
	}
	if got := f.matched(routerHashes(t, u32s(8000, 48))); got != 1 {
		t.Errorf("the block before the opaque one: %d blocks match, want 1", got)
	}
}

// TestRekeyBound: the map keeps the last RekeyBlocks insertions; an entry
// that falls out is counted, and a child of it or its removal no longer
// resolves. A parent in use is refreshed and stays.
func TestRekeyBound(t *testing.T) {
	f, pod := mismatchFixture(t)
	f.a.rekey.ring = f.a.rekey.ring[:10] // a bound of 10 blocks
	f.a.rekey.reset()
	// 10 slots from now: prompt 0's blocks (3), then 8 new ones evict the
	// first of them.
	f.applyEvents(t, stored(pod[0], nil, prompts[0], 16))
	fresh, _ := podChain(t, nil, u32s(9000, 128))
	f.applyEvents(t, stored(fresh, nil, u32s(9000, 128), 16))
	if got := testutil.ToFloat64(f.m.rekeyEvicted); got != 1 {
		t.Fatalf("evicted = %v, want 1", got)
	}
	if n := len(f.a.rekey.blocks); n != 10 {
		t.Errorf("map holds %d blocks, want the bound, 10", n)
	}
	f.applyEvents(t, wire.Event{Type: wire.BlockRemoved, Hashes: pod[0][:1]})
	if got := testutil.ToFloat64(f.m.rekeyFailed[rekeyRemovalUnknown]); got != 1 {
		t.Errorf("unresolved removals = %v, want 1 (the evicted block)", got)
	}
	// A child of prompt 0's last block resolves and refreshes it; after 10
	// more insertions it is still there.
	_, last := podChain(t, nil, prompts[0])
	child, _ := podChain(t, &last, u32s(100, 16))
	f.applyEvents(t, stored(child, &pod[0][2], u32s(100, 16), 16))
	other, _ := podChain(t, nil, u32s(9500, 16*8))
	f.applyEvents(t, stored(other, nil, u32s(9500, 16*8), 16))
	if _, ok := f.a.rekey.blocks[pod[0][2]]; !ok {
		t.Error("a parent refreshed by its child fell out of the map")
	}
	if _, ok := f.a.rekey.blocks[pod[0][1]]; ok {
		t.Error("a block neither stored nor used since 10 insertions is still in the map")
	}
}

// TestRekeyStopsOnRestart: a restart clears the pod and judges it afresh,
// not rekeyed until its new chains mismatch; a verified pod keeps no map.
func TestRekeyStopsOnRestart(t *testing.T) {
	f, _ := mismatchFixture(t)
	var changes []bool
	f.a.rekey.onChange = func(active bool) { changes = append(changes, active) }
	if err := f.a.clear(clearRestart, f.a.verify.log, "pod-a"); err != nil {
		t.Fatal(err)
	}
	if f.a.rekey.active || len(f.a.rekey.blocks) != 0 || testutil.ToFloat64(f.m.rekeyed) != 0 {
		t.Fatalf("after a restart: rekeyed %v with %d blocks, want neither", f.a.rekey.active, len(f.a.rekey.blocks))
	}
	f.applyEvents(t, stored(vecPlain, nil, u32s(0, 48), 16))
	if f.a.verify.state != Verified || len(f.a.rekey.blocks) != 0 {
		t.Errorf("a verified pod: %v with %d blocks in the map, want verified and none", f.a.verify.state, len(f.a.rekey.blocks))
	}
	if got := f.matched(vecPlain); got != 3 {
		t.Errorf("the verified pod's own hashes match %d blocks, want 3", got)
	}
	if !slices.Equal(changes, []bool{false}) {
		t.Errorf("onChange calls = %v, want [false]", changes)
	}
}

// TestRekeyOff: with RekeyBlocks 0 a mismatching pod keeps its own hashes.
func TestRekeyOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RekeyBlocks = 0
	if rk := newRekeyer(&cfg, defaultHasher(t), "pod-a", nil, nil); rk != nil {
		t.Fatal("newRekeyer with RekeyBlocks 0 is not nil")
	}
	cfg.RekeyBlocks = -1
	if err := cfg.Validate(); err == nil {
		t.Error("Validate(RekeyBlocks -1) = nil, want an error")
	}
}

func defaultHasher(t *testing.T) *blockhash.Hasher {
	t.Helper()
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
