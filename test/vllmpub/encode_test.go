package vllmpub

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestEncodeForms(t *testing.T) {
	parent, cpu := uint64(9), "CPU"
	b := Batch{TS: 1.5, DPRank: 1, Events: []Event{
		{Type: "BlockStored", BlockHashes: []uint64{1, 1 << 40}, Parent: &parent, TokenIDs: []uint32{5, 6}, BlockSize: 1, SpecKind: "full_attention"},
		{Type: "BlockRemoved", BlockHashes: []uint64{1}, Medium: &cpu},
		{Type: "AllBlocksCleared"},
	}}
	tests := []struct {
		name string
		form Form
		want any
	}{
		{"arrays", Form{}, []any{1.5, []any{
			[]any{"BlockStored", []any{int8(1), uint64(1 << 40)}, int8(9), []any{int8(5), int8(6)}, int8(1), nil, nil, nil, nil, int8(0), "full_attention"},
			[]any{"BlockRemoved", []any{int8(1)}, "CPU"},
			[]any{"AllBlocksCleared"},
		}, int8(1)}},
		{"maps without rank", Form{MapEvents: true, NoRank: true}, []any{1.5, []any{
			map[string]any{
				"type": "BlockStored", "block_hashes": []any{int8(1), uint64(1 << 40)}, "parent_block_hash": int8(9),
				"token_ids": []any{int8(5), int8(6)}, "block_size": int8(1), "kv_cache_spec_kind": "full_attention",
			},
			map[string]any{"type": "BlockRemoved", "block_hashes": []any{int8(1)}, "medium": "CPU"},
			map[string]any{"type": "AllBlocksCleared"},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Encode(b, tc.form)
			if err != nil {
				t.Fatal(err)
			}
			var got any
			if err := msgpack.Unmarshal(p, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Encode(%+v) =\n%#v\nwant\n%#v", tc.form, got, tc.want)
			}
		})
	}
	p, err := Encode(Batch{Events: []Event{{Type: "BlockRemoved", BlockHashes: []uint64{7}}}}, Form{BinHashes: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []any
	if err := msgpack.Unmarshal(p, &got); err != nil {
		t.Fatal(err)
	}
	raw := got[1].([]any)[0].([]any)[1].([]any)[0].([]byte)
	if len(raw) != 32 || raw[31] != 7 || raw[24] != 0 {
		t.Errorf("bin hash of 7 = %x, want 32 bytes ending in 00..07", raw)
	}
}
