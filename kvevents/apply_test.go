package kvevents

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Known vectors of docs/vllm.md: sha256_cbor, seed "0", block size 16,
// tokens 0..47.
var (
	vecPlain = []uint64{12687895063098490012, 1814341696565857452, 2713165534665270607}
	vecLoRA  = []uint64{14363917845617146483, 14169151309622765391, 8968918875924509582}
	vecSalt  = []uint64{8471034540256156344, 17414453070839758398, 15215922227030957406}
)

type applyFixture struct {
	idx *kvindex.Index
	id  kvindex.PodID
	a   *applier
	m   *podMetrics
	log *bytes.Buffer
}

func newApplyFixture(t testing.TB) *applyFixture {
	t.Helper()
	idx, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Hash = blockhash.Config{Algorithm: blockhash.SHA256CBOR, Seed: "0", BlockSize: 16}
	cfg.VerifyMinFailures = 3
	h, err := blockhash.NewHasher(cfg.Hash)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &applyFixture{idx: idx, id: idx.AddPod("pod-a", "model"), m: m.forPod("pod-a"), log: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(f.log, nil))
	f.a = newApplier(idx, f.id, "pod-a", newVerifier(&cfg, h, "pod-a", log, f.m), newRekeyer(&cfg, h, "pod-a", log, f.m), newGroups(log, "pod-a", 16), f.m)
	return f
}

func stored(hashes []uint64, parent *uint64, tok []uint32, bs int) wire.Event {
	e := wire.Event{Type: wire.BlockStored, Hashes: hashes, Tokens: tok, BlockSize: bs}
	if parent != nil {
		e.Parent, e.HasParent = *parent, true
	}
	return e
}

func TestApplyVerifies(t *testing.T) {
	tests := []struct {
		name   string
		events []wire.Event
		want   Verification
	}{
		{"root chain", []wire.Event{stored(vecPlain, nil, u32s(0, 48), 16)}, Verified},
		{"chain continued from a verified event", []wire.Event{
			stored(vecPlain[:1], nil, u32s(0, 16), 16),
			stored(vecPlain[1:], &vecPlain[0], u32s(16, 32), 16),
		}, Verified},
		{"lora name on every block", []wire.Event{func() wire.Event {
			e := stored(vecLoRA, nil, u32s(0, 48), 16)
			e.LoRAName = "my-lora"
			return e
		}()}, Verified},
		{"cache salt from extra keys", []wire.Event{func() wire.Event {
			e := stored(vecSalt, nil, u32s(0, 48), 16)
			e.ExtraKeys = []wire.BlockExtra{{Keys: []string{"salt"}}, {}, {}}
			return e
		}()}, Verified},
		{"unknown parent is unverifiable", []wire.Event{stored(vecPlain[1:], &vecPlain[0], u32s(16, 32), 16)}, VerifyUnknown},
		{"opaque extra keys are unverifiable", []wire.Event{func() wire.Event {
			e := stored(vecPlain, nil, u32s(0, 48), 16)
			e.ExtraKeys = []wire.BlockExtra{{Opaque: true}, {}, {}}
			return e
		}()}, VerifyUnknown},
		{"a few failures prove nothing", []wire.Event{
			stored(vecSalt, nil, u32s(0, 48), 16), stored(vecSalt, nil, u32s(0, 48), 16),
		}, VerifyUnknown},
		{"failures with no success", []wire.Event{
			stored(vecSalt, nil, u32s(0, 48), 16), stored(vecSalt, nil, u32s(0, 48), 16),
			stored(vecSalt, nil, u32s(0, 48), 16),
		}, VerifyMismatch},
		{"one success in the window outweighs failures", []wire.Event{
			stored(vecSalt, nil, u32s(0, 48), 16), stored(vecSalt, nil, u32s(0, 48), 16),
			stored(vecPlain, nil, u32s(0, 48), 16), stored(vecSalt, nil, u32s(0, 48), 16),
			stored(vecSalt, nil, u32s(0, 48), 16),
		}, Verified},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newApplyFixture(t)
			if err := f.a.apply(&wire.Batch{Events: tc.events}); err != nil {
				t.Fatal(err)
			}
			if got := f.a.verify.state; got != tc.want {
				t.Errorf("verification after %d events = %v, want %v", len(tc.events), got, tc.want)
			}
			if got := testutil.ToFloat64(f.m.verification); got != float64(tc.want) {
				t.Errorf("verification gauge = %v, want %v", got, float64(tc.want))
			}
			warned := strings.Contains(f.log.String(), "PYTHONHASHSEED")
			if warned != (tc.want == VerifyMismatch) {
				t.Errorf("warned = %v for state %v; log:\n%s", warned, tc.want, f.log)
			}
		})
	}
}

func TestApplyEvents(t *testing.T) {
	f := newApplyFixture(t)
	cpu := stored([]uint64{100, 101}, nil, nil, 0)
	cpu.Medium = "CPU"
	sliding := stored([]uint64{200}, nil, u32s(0, 16), 16)
	sliding.GroupIdx, sliding.SpecKind = 1, "sliding_window"
	short := stored([]uint64{300, 301}, nil, u32s(0, 17), 16)
	steps := []struct {
		events []wire.Event
		want   int
	}{
		{[]wire.Event{stored(vecPlain, nil, u32s(0, 48), 16)}, 3},
		{[]wire.Event{cpu, sliding}, 5},
		{[]wire.Event{short}, 7},
		{[]wire.Event{{Type: wire.BlockRemoved, Hashes: vecPlain[:2]}}, 5},
		{[]wire.Event{{Type: wire.BlockRemoved, Hashes: []uint64{100}}}, 5}, // GPU tier: absent, ignored
		{[]wire.Event{{Type: wire.BlockRemoved, Hashes: []uint64{100}, Medium: "CPU"}}, 4},
		{[]wire.Event{{Type: wire.AllBlocksCleared}}, 0},
	}
	for i, s := range steps {
		if err := f.a.apply(&wire.Batch{Events: s.events}); err != nil {
			t.Fatal(err)
		}
		if got := f.idx.PodEntries(f.id); got != s.want {
			t.Errorf("after step %d: PodEntries = %d, want %d", i, got, s.want)
		}
	}
	for name, c := range map[string]struct {
		got  prometheus.Counter
		want float64
	}{
		"skipped sliding window": {f.m.groupSkipped[skipLabel("sliding_window")], 1}, "token mismatch": {f.m.tokenMismatch, 1},
		"stored": {f.m.events[wire.BlockStored], 3}, "removed": {f.m.events[wire.BlockRemoved], 3},
		"cleared": {f.m.clearEvent, 1},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("counter %s = %v, want %v", name, got, c.want)
		}
	}
	if err := f.a.applyPayload([]byte{0xc1}); err == nil || testutil.ToFloat64(f.m.decodeErrors) != 1 {
		t.Errorf("applyPayload(garbage) = %v, decode errors %v; want an error counted once", err, testutil.ToFloat64(f.m.decodeErrors))
	}
	if err := f.idx.RemovePod(f.id); err != nil {
		t.Fatal(err)
	}
	if err := f.a.apply(&wire.Batch{Events: []wire.Event{{Type: wire.AllBlocksCleared}}}); err == nil {
		t.Error("apply to a removed pod succeeded, want ErrUnknownPod")
	}
}

// TestApplyRestartVerifiesAfresh clears a verified pod and then applies
// root chains of another hash configuration: after a restart the verifier
// starts over and finds the mismatch as for a fresh pod; after a gap older
// than the replay buffer (the same process) the pod stays verified.
func TestApplyRestartVerifiesAfresh(t *testing.T) {
	tests := []struct {
		reason     clearReason
		afterClear Verification
		want       Verification
	}{
		{clearRestart, VerifyUnknown, VerifyMismatch},
		{clearExhausted, Verified, Verified},
	}
	for _, tc := range tests {
		t.Run(tc.reason.String(), func(t *testing.T) {
			f := newApplyFixture(t)
			if err := f.a.apply(&wire.Batch{Events: []wire.Event{stored(vecPlain, nil, u32s(0, 48), 16)}}); err != nil {
				t.Fatal(err)
			}
			if got := f.a.verify.state; got != Verified {
				t.Fatalf("verification before clear(%v) = %v, want %v", tc.reason, got, Verified)
			}
			if err := f.a.clear(tc.reason, slog.New(slog.NewTextHandler(f.log, nil)), "pod-a"); err != nil {
				t.Fatal(err)
			}
			if got := f.a.verify.state; got != tc.afterClear {
				t.Errorf("verification after clear(%v) = %v, want %v", tc.reason, got, tc.afterClear)
			}
			if got := testutil.ToFloat64(f.m.verification); got != float64(tc.afterClear) {
				t.Errorf("verification gauge after clear(%v) = %v, want %v", tc.reason, got, float64(tc.afterClear))
			}
			other := stored(vecSalt, nil, u32s(0, 48), 16) // salted hashes: another configuration
			for range 3 {
				if err := f.a.apply(&wire.Batch{Events: []wire.Event{other}}); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.a.verify.state; got != tc.want {
				t.Errorf("verification after clear(%v) and 3 mismatching root chains = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

// cacheIndex is an index that records the pods it is told had their cache
// cleared.
type cacheIndex struct {
	*kvindex.Index
	cleared []kvindex.PodID
}

func (c *cacheIndex) CacheCleared(pod kvindex.PodID) { c.cleared = append(c.cleared, pod) }

// TestApplyTellsCacheCleared: an AllBlocksCleared event and a restart of
// the publisher clear the pod's cache, and the index is told so after
// ClearPod; a gap the replay could not fill clears only the entries this
// replica cannot vouch for, and is not.
func TestApplyTellsCacheCleared(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(f *applyFixture) error
		want int
	}{
		{"AllBlocksCleared", func(f *applyFixture) error {
			return f.a.apply(&wire.Batch{Events: []wire.Event{{Type: wire.AllBlocksCleared}}})
		}, 1},
		{"restart", func(f *applyFixture) error { return f.a.clear(clearRestart, slog.New(slog.DiscardHandler), "pod-a") }, 1},
		{"exhausted", func(f *applyFixture) error { return f.a.clear(clearExhausted, slog.New(slog.DiscardHandler), "pod-a") }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newApplyFixture(t)
			idx := &cacheIndex{Index: f.idx}
			f.a.idx = idx
			if err := tc.do(f); err != nil {
				t.Fatal(err)
			}
			if len(idx.cleared) != tc.want || tc.want > 0 && idx.cleared[0] != f.id {
				t.Errorf("CacheCleared calls = %v, want %d for the pod", idx.cleared, tc.want)
			}
		})
	}
}
