package vllmpub

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Event is one KV-cache event, with vLLM's field names.
type Event struct {
	// Type is "BlockStored", "BlockRemoved", "AllBlocksCleared" (or any
	// other tag, to test that subscribers skip it).
	Type string
	// BlockHashes are the 64-bit block hashes (BlockStored, BlockRemoved).
	BlockHashes []uint64
	// Parent is the parent block's hash; nil when the chain starts at the
	// root.
	Parent *uint64
	// TokenIDs and BlockSize describe the stored blocks' tokens.
	TokenIDs  []uint32
	BlockSize int
	// Medium is nil for vLLM's default (GPU), or "CPU", ...
	Medium *string
	// LoRAName is the adapter's name, nil without one.
	LoRAName *string
	// SpecKind is the kv_cache_spec_kind ("" omits it).
	SpecKind string
}

// Form selects one of the wire forms vLLM's releases used.
type Form struct {
	// MapEvents encodes events as maps with a "type" key (newer releases)
	// instead of tag-first positional arrays.
	MapEvents bool
	// BinHashes sends hashes as 32 raw digest bytes
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0): the 64-bit value in the last 8
	// bytes, the first 24 derived from it.
	BinHashes bool
	// NoRank encodes the v0.9 two-element batch without data_parallel_rank.
	NoRank bool
}

// Batch is one event batch.
type Batch struct {
	TS     float64
	Events []Event
	DPRank int
}

// Encode returns b's msgpack payload in form f, with the shortest integer
// encodings, as vLLM's msgspec writes them.
func Encode(b Batch, f Form) ([]byte, error) {
	events := make([]any, len(b.Events))
	for i, e := range b.Events {
		if f.MapEvents {
			events[i] = mapEvent(e, f)
		} else {
			events[i] = arrayEvent(e, f)
		}
	}
	outer := []any{b.TS, events, b.DPRank}
	if f.NoRank {
		outer = outer[:2]
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(outer); err != nil {
		return nil, fmt.Errorf("vllmpub: encode batch: %w", err)
	}
	return buf.Bytes(), nil
}

// Digest returns the 32 raw bytes standing for hash v in BinHashes form.
func Digest(v uint64) []byte {
	d := make([]byte, 32)
	for i := range 3 {
		binary.BigEndian.PutUint64(d[8*i:], v*uint64(i+7)^0x5bd1e995)
	}
	binary.BigEndian.PutUint64(d[24:], v)
	return d
}

func hashes(hs []uint64, f Form) any {
	if !f.BinHashes {
		return hs
	}
	out := make([][]byte, len(hs))
	for i, h := range hs {
		out[i] = Digest(h)
	}
	return out
}

func parent(p *uint64, f Form) any {
	switch {
	case p == nil:
		return nil
	case f.BinHashes:
		return Digest(*p)
	default:
		return *p
	}
}

// arrayEvent is msgspec's array_like form: tag first, then the fields in
// declaration order, trailing defaults omitted.
func arrayEvent(e Event, f Form) []any {
	switch e.Type {
	case "BlockStored":
		out := []any{e.Type, hashes(e.BlockHashes, f), parent(e.Parent, f), e.TokenIDs, e.BlockSize, nil, e.Medium}
		if e.LoRAName != nil || e.SpecKind != "" {
			out = append(out, e.LoRAName)
		}
		if e.SpecKind != "" {
			out = append(out, nil, 0, e.SpecKind)
		}
		return out
	case "BlockRemoved":
		return []any{e.Type, hashes(e.BlockHashes, f), e.Medium}
	default:
		return []any{e.Type}
	}
}

// mapEvent is the map form: fields by name, defaults omitted.
func mapEvent(e Event, f Form) map[string]any {
	out := map[string]any{"type": e.Type}
	if e.Type != "BlockStored" && e.Type != "BlockRemoved" {
		return out
	}
	out["block_hashes"] = hashes(e.BlockHashes, f)
	if e.Medium != nil {
		out["medium"] = *e.Medium
	}
	if e.Type == "BlockRemoved" {
		return out
	}
	out["parent_block_hash"] = parent(e.Parent, f)
	out["token_ids"] = e.TokenIDs
	out["block_size"] = e.BlockSize
	if e.LoRAName != nil {
		out["lora_name"] = *e.LoRAName
	}
	if e.SpecKind != "" {
		out["kv_cache_spec_kind"] = e.SpecKind
	}
	return out
}
