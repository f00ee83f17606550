package wire

import (
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// EventType is the kind of one KV-cache event.
type EventType uint8

// The event types vLLM publishes. Events of any other type are skipped by
// the decoder and counted in Batch.Skipped.
const (
	BlockStored      EventType = iota + 1 // blocks filled and entered the prefix cache
	BlockRemoved                          // blocks evicted
	AllBlocksCleared                      // the whole prefix cache was reset
)

// NumEventTypes bounds the EventType values: every t < NumEventTypes has a
// name, 0 being "unknown".
const NumEventTypes = int(AllBlocksCleared) + 1

var eventTypeNames = [NumEventTypes]string{"unknown", "block_stored", "block_removed", "all_blocks_cleared"}

// String returns the snake_case name used in metric labels.
func (t EventType) String() string {
	if int(t) < len(eventTypeNames) {
		return eventTypeNames[t]
	}
	return "unknown"
}

// Batch is one decoded event batch: vLLM publishes one per scheduler step
// that produced events.
type Batch struct {
	// TS is the publisher's wall-clock time in seconds since the Unix epoch.
	TS float64
	// DPRank is the data-parallel rank that published the batch; HasDPRank
	// is false when the batch did not say (vLLM v0.9, or DP disabled).
	DPRank    int
	HasDPRank bool
	// Events are the batch's events of known types, in order.
	Events []Event
	// Skipped counts events of unknown types that were ignored.
	Skipped int
}

// Event is one KV-cache event. Slices alias the Decoder's buffers and are
// valid until its next Decode.
type Event struct {
	Type EventType
	// Hashes are the blocks' 64-bit hashes, as the index keys them. Raw
	// digest bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) are reduced to
	// their last 8 bytes read big-endian.
	Hashes []uint64
	// Digests holds the full digests when every hash was sent as raw digest
	// bytes, 32 (SHA-256) or 16 (xxh3_128); nil otherwise.
	Digests []blockhash.Digest
	// Parent is the hash of the block before Hashes[0]; HasParent is false
	// when the chain starts at the root (parent_block_hash nil).
	Parent    uint64
	HasParent bool
	// ParentDigest is the parent's full digest when it was sent as raw
	// digest bytes, 32 or 16 (HasParentDigest).
	ParentDigest    blockhash.Digest
	HasParentDigest bool
	// Tokens are the token ids of exactly these blocks, BlockSize per block
	// for full-attention groups; often empty for offloaded tiers.
	Tokens []uint32
	// BlockSize is the number of tokens per block, 0 when absent.
	BlockSize int
	// Medium is the cache medium as sent ("GPU", "CPU", ...); "" when nil,
	// which means GPU.
	Medium string
	// LoRAName is the LoRA adapter the blocks were computed with, "" for none.
	LoRAName string
	// GroupIdx is the event's KV-cache group (group_idx), 0 when absent.
	// Models with several kinds of attention layers have one group per
	// kind; BlockRemoved names the group but not its kind.
	GroupIdx int
	// SpecKind is the group's kv_cache_spec_kind ("full_attention",
	// "mla_attention", "sliding_window", ...); "" when absent (releases
	// before it, or BlockRemoved).
	SpecKind string
	// SlidingWindow is the group's kv_cache_spec_sliding_window in tokens,
	// 0 when absent (groups other than sliding window).
	SlidingWindow int
	// MultimodalFrom is 1 + the first block TensorRT-LLM's mm_keys give
	// multimodal segments, whose hash inputs the event does not spell
	// out; 0 when none.
	MultimodalFrom int
	// ExtraKeys holds each block's extra hash keys when the event carried
	// them (one per block); nil when absent.
	ExtraKeys []BlockExtra
}

// BlockExtra is one block's extra hash keys as an event reports them.
type BlockExtra struct {
	// Keys are the tuple's string elements (LoRA name, cache_salt), in
	// order; nil when the block has no extra keys.
	Keys []string
	// Opaque is true when the tuple held anything but strings (multimodal
	// hashes, prompt-embeds digests): such a block cannot be re-hashed.
	Opaque bool
}

// Tier is the index tier of the event's medium.
func (e *Event) Tier() kvindex.Tier { return kvindex.ParseTier(e.Medium) }

// TokensMatch reports whether Tokens holds exactly BlockSize tokens per hash.
func (e *Event) TokensMatch() bool {
	return e.BlockSize > 0 && len(e.Tokens) == e.BlockSize*len(e.Hashes)
}
