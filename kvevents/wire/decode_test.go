package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// enc encodes v as msgpack; compact picks the shortest integer encodings, as
// Python's msgpack does, instead of fixed 64-bit ones.
func enc(t testing.TB, v any, compact bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(compact)
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tokens(lo, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

func u32s(lo, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(lo + i)
	}
	return out
}

func digest(b byte) []byte { return digestN(b, 32) }

// digestN returns n bytes b ending in 0x01.
func digestN(b byte, n int) []byte {
	d := bytes.Repeat([]byte{b}, n)
	d[n-1] = 0x01
	return d
}

// fullDigest returns the Digest of b.
func fullDigest(b []byte) blockhash.Digest {
	d, err := blockhash.DigestFromBytes(b)
	if err != nil {
		panic(err)
	}
	return d
}

type decodeCase struct {
	name    string
	payload any
	compact bool
	want    Batch
}

var decodeCases = []decodeCase{
	{
		name: "array outer, positional BlockStored, fixed-width ints",
		payload: []any{1.5, []any{
			[]any{"BlockStored", []uint64{1 << 63, 7}, nil, tokens(0, 4), 2, nil, nil},
		}, 0},
		want: Batch{TS: 1.5, HasDPRank: true, Events: []Event{{
			Type: BlockStored, Hashes: []uint64{1 << 63, 7}, Tokens: u32s(0, 4), BlockSize: 2,
		}}},
	},
	{
		name: "v0.9 outer array of two, compact ints, parent and medium",
		payload: []any{2.0, []any{
			[]any{"BlockStored", []any{5, 300, 70000, uint64(1) << 40}, 9, tokens(100000, 4), 1, nil, "CPU"},
		}},
		compact: true,
		want: Batch{TS: 2, Events: []Event{{
			Type: BlockStored, Hashes: []uint64{5, 300, 70000, 1 << 40}, Parent: 9, HasParent: true,
			Tokens: u32s(100000, 4), BlockSize: 1, Medium: "CPU",
		}}},
	},
	{
		name: "token ids of every compact width",
		payload: []any{3.0, []any{
			[]any{"BlockStored", []any{1, 2, 3}, nil, []any{0, 127, 128, 255, 256, 65535, 65536, uint32(math.MaxUint32)}, 3},
		}},
		compact: true,
		want: Batch{TS: 3, Events: []Event{{
			Type: BlockStored, Hashes: []uint64{1, 2, 3},
			Tokens: []uint32{0, 127, 128, 255, 256, 65535, 65536, math.MaxUint32}, BlockSize: 3,
		}}},
	},
	{
		name: "newest positional layout with trailing unknown fields",
		payload: []any{3.0, []any{
			[]any{
				"BlockStored",
				[]any{11},
				nil, tokens(0, 2), 2, nil, "GPU", "alice",
				[]any{[]any{"alice", "salt"}},
				1, "sliding_window", 128, "future",
				[]any{1, 2},
			},
			[]any{"BlockRemoved", []any{11, 12}, "GPU", 1, "future"},
			[]any{"AllBlocksCleared", "future"},
		}, 3},
		compact: true,
		want: Batch{TS: 3, DPRank: 3, HasDPRank: true, Events: []Event{
			{
				Type: BlockStored, Hashes: []uint64{11}, Tokens: u32s(0, 2), BlockSize: 2, Medium: "GPU",
				LoRAName: "alice", GroupIdx: 1, SpecKind: "sliding_window", SlidingWindow: 128,
				ExtraKeys: []BlockExtra{{Keys: []string{"alice", "salt"}}},
			},
			{Type: BlockRemoved, Hashes: []uint64{11, 12}, Medium: "GPU", GroupIdx: 1},
			{Type: AllBlocksCleared},
		}},
	},
	{
		name: "map outer and map events, type key last, defaults omitted",
		payload: map[string]any{"ts": 4.0, "future": []any{1}, "data_parallel_rank": nil, "events": []any{
			map[string]any{"block_hashes": []any{21, 22}, "token_ids": tokens(5, 2), "block_size": 1, "type": "BlockStored", "group_idx": 2, "kv_cache_spec_kind": "mla_attention", "kv_cache_spec_sliding_window": nil},
			map[string]any{"type": "BlockRemoved", "block_hashes": []any{21}, "medium": "CPU", "locality": "x", "group_idx": 2},
			map[string]any{"type": "AllBlocksCleared"},
		}},
		compact: true,
		want: Batch{TS: 4, Events: []Event{
			{Type: BlockStored, Hashes: []uint64{21, 22}, Tokens: u32s(5, 2), BlockSize: 1, GroupIdx: 2, SpecKind: "mla_attention"},
			{Type: BlockRemoved, Hashes: []uint64{21}, Medium: "CPU", GroupIdx: 2},
			{Type: AllBlocksCleared},
		}},
	},
	{
		name: "SGLang's tagged arrays with signed ids, TensorRT-LLM's map with mm_keys",
		payload: []any{6.0, []any{
			[]any{"BlockStored", []any{int64(-5)}, int64(-9), tokens(0, 2), 2, nil},
			map[string]any{
				"type": "BlockStored", "block_hashes": []any{int64(-7), 8}, "parent_block_hash": nil, "token_ids": tokens(2, 4), "block_size": 2,
				"mm_keys": []any{nil, []any{map[string]any{"type": "mm_key", "hash": "ab", "start_offset": 1}}},
			},
			map[string]any{"type": "BlockStored", "block_hashes": []any{9}, "token_ids": tokens(6, 2), "block_size": 2, "mm_keys": []any{[]any{}}},
		}, 0},
		compact: true,
		want: Batch{TS: 6, HasDPRank: true, Events: []Event{
			{Type: BlockStored, Hashes: []uint64{uint64(1<<64 - 5)}, Parent: uint64(1<<64 - 9), HasParent: true, Tokens: u32s(0, 2), BlockSize: 2},
			{Type: BlockStored, Hashes: []uint64{uint64(1<<64 - 7), 8}, Tokens: u32s(2, 4), BlockSize: 2, MultimodalFrom: 2},
			{Type: BlockStored, Hashes: []uint64{9}, Tokens: u32s(6, 2), BlockSize: 2},
		}},
	},
	{
		name: "raw digest hashes and parent",
		payload: []any{5.0, []any{
			[]any{"BlockStored", [][]byte{digest(0xaa), digest(0xbb)}, digest(0xcc), []any{}, 0, nil, "CPU"},
		}, nil},
		want: Batch{TS: 5, Events: []Event{{
			Type: BlockStored, Hashes: []uint64{0xaaaaaaaaaaaaaa01, 0xbbbbbbbbbbbbbb01},
			Digests: []blockhash.Digest{fullDigest(digest(0xaa)), fullDigest(digest(0xbb))},
			Parent:  0xcccccccccccccc01, HasParent: true, ParentDigest: fullDigest(digest(0xcc)), HasParentDigest: true,
			Medium: "CPU",
		}}},
	},
	{
		name: "raw xxh3_128 digest hashes and parent",
		payload: []any{5.0, []any{
			[]any{"BlockStored", [][]byte{digestN(0xaa, 16), digestN(0xbb, 16)}, digestN(0xcc, 16), []any{}, 0, nil, "CPU"},
		}, nil},
		want: Batch{TS: 5, Events: []Event{{
			Type: BlockStored, Hashes: []uint64{0xaaaaaaaaaaaaaa01, 0xbbbbbbbbbbbbbb01},
			Digests: []blockhash.Digest{fullDigest(digestN(0xaa, 16)), fullDigest(digestN(0xbb, 16))},
			Parent:  0xcccccccccccccc01, HasParent: true, ParentDigest: fullDigest(digestN(0xcc, 16)), HasParentDigest: true,
			Medium: "CPU",
		}}},
	},
	{
		name: "short and long raw hashes use their last 8 bytes",
		payload: []any{6.0, []any{
			[]any{"BlockRemoved", [][]byte{{1, 2}, bytes.Repeat([]byte{0, 1}, 8)}},
		}},
		want: Batch{TS: 6, Events: []Event{{Type: BlockRemoved, Hashes: []uint64{0x0102, 0x0001000100010001}}}},
	},
	{
		name: "unknown event tags and extra keys with opaque parts",
		payload: []any{7.0, []any{
			[]any{"BlockPinned", 1, 2},
			map[string]any{"type": "Future", "block_hashes": []any{1}},
			[]any{},
			[]any{"BlockStored", []any{1, 2}, nil, tokens(0, 2), 1, nil, nil, nil, []any{nil, []any{"lora", []byte{1}}}},
		}},
		compact: true,
		want: Batch{TS: 7, Skipped: 3, Events: []Event{{
			Type: BlockStored, Hashes: []uint64{1, 2}, Tokens: u32s(0, 2), BlockSize: 1,
			ExtraKeys: []BlockExtra{{}, {Keys: []string{"lora"}, Opaque: true}},
		}}},
	},
}

func TestDecode(t *testing.T) {
	d := NewDecoder()
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Decode(enc(t, tc.payload, tc.compact))
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("Decode() =\n%+v\nwant\n%+v", *got, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	stored := enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1, 2}, nil, tokens(0, 32), 16}}, 0}, true)
	deep := []any{1}
	for range 40 {
		deep = []any{deep}
	}
	tests := []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "EOF"},
		{"scalar outer", enc(t, 1, true), "array length"},
		{"outer array of one", enc(t, []any{1.0}, true), "outer array of 1"},
		{"huge declared array", []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff}, "array of"},
		{"huge declared map", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "map of"},
		{"huge declared string", []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}, "EOF"},
		{"string hash", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{"x"}}}}, true), "block hash"},
		{"negative token", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}}}}, true), "token id"},
		{"string token", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{"a"}}}}, true), "token id"},
		{"scalar event", enc(t, []any{1.0, []any{7}}, true), "event of msgpack code"},
		{"int tag", enc(t, []any{1.0, []any{[]any{7}}}, true), "string of msgpack code"},
		{"negative rank", enc(t, []any{1.0, []any{}, -1}, true), "data_parallel_rank"},
		{"huge block size", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{}, 1 << 30}}}, true), "block_size"},
		{"deep nesting", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{}, 1, deep}}}, true), "nested deeper"},
	}
	d := NewDecoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Decode(tc.payload)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode(%x) error = %v, want one containing %q", tc.payload, err, tc.want)
			}
			if strings.Contains(tc.want, "of") && !strings.Contains(tc.want, "msgpack") && !errors.Is(err, ErrMalformed) &&
				!strings.Contains(tc.want, "EOF") {
				t.Errorf("Decode() error = %v, want ErrMalformed", err)
			}
		})
	}
	for i := range stored {
		if _, err := d.Decode(stored[:i]); err == nil {
			t.Errorf("Decode(first %d of %d bytes) succeeded, want an error", i, len(stored))
		}
	}
	// The decoder stays usable after errors.
	if _, err := d.Decode(stored); err != nil {
		t.Fatalf("Decode(valid) after errors: %v", err)
	}
}

func TestEventHelpers(t *testing.T) {
	e := Event{Hashes: []uint64{1, 2}, Tokens: u32s(0, 32), BlockSize: 16}
	if !e.TokensMatch() || e.Tier() != kvindex.TierGPU {
		t.Errorf("helpers of %+v: TokensMatch %v Tier %v", e, e.TokensMatch(), e.Tier())
	}
	e.Tokens, e.Medium = e.Tokens[:31], "CPU"
	if e.TokensMatch() || e.Tier() != kvindex.TierCPU {
		t.Errorf("helpers of %+v: TokensMatch %v Tier %v", e, e.TokensMatch(), e.Tier())
	}
	if BlockStored.String() != "block_stored" || EventType(9).String() != "unknown" {
		t.Errorf("EventType names: %v %v", BlockStored, EventType(9))
	}
}

func TestDecoderReleasesHugeBuffers(t *testing.T) {
	d := NewDecoder()
	huge := enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, tokens(0, 2*maxRetained), 1}}}, true)
	if _, err := d.Decode(huge); err != nil {
		t.Fatal(err)
	}
	b, err := d.Decode(storedBatch(t))
	if err != nil {
		t.Fatal(err)
	}
	if cap(d.tokens) > maxRetained || len(b.Events[0].Tokens) != 256 {
		t.Errorf("after a huge batch then a small one: tokens cap %d (want <= %d), %d tokens (want 256)",
			cap(d.tokens), maxRetained, len(b.Events[0].Tokens))
	}
}

// TestDecodeSkipsExtWithinThePayload holds skipped ext values to the bytes
// the payload has: a 40-byte batch declaring a 650 MB ext32 once cost a
// megabyte of garbage per decode (the fuzzer ran out of memory on it).
func TestDecodeSkipsExtWithinThePayload(t *testing.T) {
	hostile := []byte("\x93\x00\x91\x97\xablkv\xc8M\x11\xcf\xa7\x08\xa8$\xf6\x12\xc9&\xcfE@!\xdeu]E;\xf3")
	d := NewDecoder()
	if _, err := d.Decode(hostile); err == nil {
		t.Fatal("Decode of a truncated ext32 succeeded")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		_, _ = d.Decode(hostile)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4096 {
		t.Errorf("decoding a %d-byte batch allocates %d bytes", len(hostile), per)
	}
	for _, tc := range []struct {
		name string
		ext  []byte
	}{
		{"fixext4", []byte{0xd6, 1, 0xaa, 0xbb, 0xcc, 0xdd}},
		{"ext8", []byte{0xc7, 3, 1, 0xaa, 0xbb, 0xcc}},
		{"ext16", []byte{0xc8, 0, 2, 1, 0xaa, 0xbb}},
		{"ext32", []byte{0xc9, 0, 0, 0, 1, 1, 0xaa}},
	} {
		// An ext as an unknown trailing field of a BlockRemoved event (after
		// block_hashes, medium and group_idx) is skipped.
		p := append([]byte{0x92, 0x00, 0x91, 0x95, 0xac}, "BlockRemoved"...)
		p = append(append(p, 0x91, 0x07, 0xc0, 0x00), tc.ext...)
		b, err := d.Decode(p)
		if err != nil || len(b.Events) != 1 || len(b.Events[0].Hashes) != 1 || b.Events[0].Hashes[0] != 7 {
			t.Errorf("%s: Decode = %+v, %v; want one BlockRemoved of hash 7", tc.name, b, err)
		}
		if _, err := d.Decode(p[:len(p)-1]); err == nil {
			t.Errorf("%s: a truncated ext decoded", tc.name)
		}
	}
}
