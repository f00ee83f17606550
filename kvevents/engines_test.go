package kvevents

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents/wire"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// foreignFixture is an applier of a pod whose engine names blocks by ids
// of its own.
func foreignFixture(t testing.TB) *applyFixture {
	f := newApplyFixture(t)
	f.a.foreign = true
	f.a.rekey.follow("trtllm")
	return f
}

// chainHashes is kvrouter's hashes of tokens, 16 to a block, from the root.
func chainHashes(t testing.TB, tokens []uint32) []uint64 {
	h, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256CBOR, Seed: "0", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	d := h.Root()
	for i := 0; i+16 <= len(tokens); i += 16 {
		d = h.Block(d, i == 0, tokens[i:i+16], blockhash.Extra{})
		out = append(out, d.Value())
	}
	return out
}

// TestForeignBlocksRechunked: an engine's 32-token blocks (TensorRT-LLM's
// default) are two of kvrouter's 16-token blocks each, under kvrouter's
// hashes whatever the engine's ids (signed, as SGLang and TensorRT-LLM
// send them); a child continues its parent's chain, and a removal takes
// both halves.
func TestForeignBlocksRechunked(t *testing.T) {
	f := foreignFixture(t)
	tokens := u32s(0, 96)
	want := chainHashes(t, tokens)
	neg := func(v int64) uint64 { return uint64(v) }
	first := wire.Event{Type: wire.BlockStored, Hashes: []uint64{neg(-7), 11}, Tokens: tokens[:64], BlockSize: 32}
	child := wire.Event{Type: wire.BlockStored, Hashes: []uint64{neg(-3)}, Parent: 11, HasParent: true, Tokens: tokens[64:], BlockSize: 32}
	if err := f.a.apply(&wire.Batch{Events: []wire.Event{first, child}}); err != nil {
		t.Fatal(err)
	}
	for i, h := range want {
		if !f.idx.Holds(f.id, h) {
			t.Errorf("block %d (%d) not indexed", i, h)
		}
	}
	if got := f.idx.PodEntries(f.id); got != len(want) {
		t.Errorf("PodEntries = %d, want %d", got, len(want))
	}
	if err := f.a.apply(&wire.Batch{Events: []wire.Event{{Type: wire.BlockRemoved, Hashes: []uint64{11}}}}); err != nil {
		t.Fatal(err)
	}
	for i, h := range want {
		if held := f.idx.Holds(f.id, h); held != (i < 2 || i > 3) {
			t.Errorf("after removing the second 32-token block: block %d held %v", i, held)
		}
	}
}

// TestForeignBlockSizeRefused: blocks that are no multiple of kvrouter's
// (SGLang's default page of one token) cannot be indexed: counted, and
// one WARN names the pod and the setting.
func TestForeignBlockSizeRefused(t *testing.T) {
	f := foreignFixture(t)
	for i := range 3 {
		e := wire.Event{Type: wire.BlockStored, Hashes: []uint64{uint64(100 + i)}, Tokens: u32s(i, 1), BlockSize: 1}
		if i > 0 {
			e.Parent, e.HasParent = uint64(99+i), true
		}
		if err := f.a.apply(&wire.Batch{Events: []wire.Event{e}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.idx.PodEntries(f.id); got != 0 {
		t.Errorf("PodEntries = %d, want 0", got)
	}
	if got := testutil.ToFloat64(f.m.rekeyFailed[rekeyBlockSize]); got < 1 {
		t.Errorf("rekey_failed_blocks_total{block_size} = %v, want counted", got)
	}
	if n := strings.Count(f.log.String(), "no multiple of kvrouter's block size"); n != 1 {
		t.Errorf("%d WARNs of the block size, want 1: %s", n, f.log.String())
	}
}

// TestForeignNeverVerified: a foreign pod's events are not checked
// against vLLM's hashes (they never match), so the pod never turns
// "mismatch" and its entries are never cleared for it.
func TestForeignNeverVerified(t *testing.T) {
	f := foreignFixture(t)
	tokens := u32s(0, 160)
	for i := range 10 {
		e := wire.Event{Type: wire.BlockStored, Hashes: []uint64{uint64(1000 + i)}, Tokens: tokens[i*16 : (i+1)*16], BlockSize: 16}
		if i > 0 {
			e.Parent, e.HasParent = uint64(999+i), true
		}
		if err := f.a.apply(&wire.Batch{Events: []wire.Event{e}}); err != nil {
			t.Fatal(err)
		}
	}
	if f.a.verify.state != VerifyUnknown {
		t.Errorf("verification = %v, want unknown: a foreign pod is not verified", f.a.verify.state)
	}
	want := chainHashes(t, tokens)
	var got []uint64
	for _, h := range want {
		if f.idx.Holds(f.id, h) {
			got = append(got, h)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("indexed %d of kvrouter's %d blocks", len(got), len(want))
	}
}

// FuzzForeignBlocks plays an engine's random stores (blocks of one, two or
// three of kvrouter's, or of a size that is no multiple, from the root or
// after a block seen before or never seen), removals and clears against a
// foreign pod, and holds the index after each step to a model written from
// the rekeying rule: each live block of the engine is its blocks of
// kvrouter's, chained from its parent's last.
func FuzzForeignBlocks(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 3, 0, 1, 1, 2, 0})
	f.Add([]byte{1, 5, 0, 9, 2, 1, 4, 0, 0, 3, 3, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		fx := foreignFixture(t)
		h, err := blockhash.NewHasher(blockhash.Config{Algorithm: blockhash.SHA256CBOR, Seed: "0", BlockSize: 16})
		if err != nil {
			t.Fatal(err)
		}
		type block struct {
			last blockhash.Digest
			keys []uint64
		}
		blocks := map[uint64]block{} // the engine's live blocks by id
		var ids []uint64             // every id stored, in order
		live := map[uint64]int{}     // kvrouter's hashes held, counted
		next := opReader(&ops)
		for step := 0; len(ops) > 0; step++ {
			op, arg := next(), next()
			var e wire.Event
			switch op % 5 {
			case 0, 1, 2: // store one block
				k := int(arg%4) + 1 // 4: 24 tokens, refused
				size := 16 * k
				if k == 4 {
					size = 24
				}
				id := uint64(step+1) << 8
				e = wire.Event{Type: wire.BlockStored, Hashes: []uint64{id}, Tokens: u32s(int(arg)*100+step, size), BlockSize: size}
				parent, first := h.Root(), true
				known := true
				if op%5 > 0 && len(ids) > 0 { // after a block: seen, or gone
					pid := ids[int(arg)%len(ids)]
					e.Parent, e.HasParent = pid, true
					b, ok := blocks[pid]
					parent, first, known = b.last, false, ok
				}
				if !known || k == 4 {
					break
				}
				var keys []uint64
				for j := range k {
					parent = h.Block(parent, first && j == 0, e.Tokens[j*16:(j+1)*16], blockhash.Extra{})
					keys = append(keys, parent.Value())
					live[parent.Value()]++
				}
				blocks[id] = block{last: parent, keys: keys}
				ids = append(ids, id)
			case 3: // remove a block seen
				if len(ids) == 0 {
					continue
				}
				id := ids[int(arg)%len(ids)]
				e = wire.Event{Type: wire.BlockRemoved, Hashes: []uint64{id}}
				if b, ok := blocks[id]; ok {
					for _, key := range b.keys {
						if live[key]--; live[key] == 0 {
							delete(live, key)
						}
					}
					delete(blocks, id)
				}
			default:
				e = wire.Event{Type: wire.AllBlocksCleared}
				clear(blocks)
				clear(live)
			}
			if err := fx.a.apply(&wire.Batch{Events: []wire.Event{e}}); err != nil {
				t.Fatal(err)
			}
			for key := range live {
				if !fx.idx.Holds(fx.id, key) {
					t.Fatalf("step %d: block %d not indexed", step, key)
				}
			}
			if got := fx.idx.PodEntries(fx.id); got != len(live) {
				t.Fatalf("step %d: %d entries, want %d", step, got, len(live))
			}
		}
	})
}

// TestForeignMultimodalCounted: TensorRT-LLM's mm_keys mark the blocks
// with multimodal segments, whose hash inputs the event does not spell
// out: those blocks are not indexed, and are counted.
func TestForeignMultimodalCounted(t *testing.T) {
	f := foreignFixture(t)
	tokens := u32s(0, 64)
	payload, err := msgpack.Marshal([]any{1.7e9, []any{map[string]any{
		"type": "BlockStored", "block_hashes": []int64{-1, 2}, "parent_block_hash": nil, "token_ids": tokens, "block_size": 32,
		"mm_keys": []any{nil, []any{map[string]any{"type": "mm_key", "hash": "9f3a", "start_offset": 3}}},
	}}, 0})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.a.dec.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.apply(b); err != nil {
		t.Fatal(err)
	}
	want := chainHashes(t, tokens)
	for i, h := range want {
		if held := f.idx.Holds(f.id, h); held != (i < 2) {
			t.Errorf("block %d held %v, want %v", i, held, i < 2)
		}
	}
	if got := testutil.ToFloat64(f.m.rekeyFailed[rekeyExtraKeys]); got != 1 {
		t.Errorf("rekey_failed_blocks_total{extra_keys} = %v, want 1", got)
	}
}

// TestEngineChangeFollowedAfresh: a pod whose engine changes (an
// annotation edited) is followed by a new subscriber of that engine.
func TestEngineChangeFollowedAfresh(t *testing.T) {
	checkGoroutines(t)
	f := newFleet(t, testConfig())
	p := pod.Pod{Name: "pod-a", IP: "127.0.0.1", EventPort: 1, ReplayPort: 2, Model: "m"}
	for _, engine := range []string{"", pod.EngineSGLang, pod.EngineVLLM} {
		p.Engine = engine
		if err := f.mgr.Ensure(p); err != nil {
			t.Fatal(err)
		}
		want := cmp.Or(engine, pod.EngineVLLM)
		eventually(t, "the engine "+want, func() bool {
			st := f.mgr.Status()
			return len(st) == 1 && st[0].Engine == want
		})
	}
}
