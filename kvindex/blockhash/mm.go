package blockhash

import (
	"encoding/binary"
	"slices"
)

// MMItem is a multimodal item of a prompt (an image, an audio clip, a
// video) as vLLM keys the blocks its placeholder tokens fill: its
// identifier (the processor's content hash, as vLLM's render endpoint
// answers it in features.mm_hashes) and the prompt tokens its placeholder
// takes (features.mm_placeholders).
type MMItem struct {
	Hash   string
	Offset int // the placeholder's first token, counted from the first token hashed
	Length int // its tokens
}

// mmKey is one block's key of an item: (identifier, the item's offset
// from the block's first token), negative when the item began in an
// earlier block.
type mmKey struct {
	hash string
	off  int
}

// appendMMKeys appends the keys of the block of tokens [start, end): one
// per item whose placeholder overlaps it, in the order of the items (by
// offset). It is vLLM's _gen_mm_extra_hash_keys (vllm/v1/core/
// kv_cache_utils.py at vLLM 001cabc1, since the fix that added the
// offset).
func appendMMKeys(dst []mmKey, items []MMItem, start, end int) []mmKey {
	for _, it := range items {
		if end <= it.Offset {
			break
		}
		if start >= it.Offset+it.Length {
			continue
		}
		dst = append(dst, mmKey{it.Hash, it.Offset - start})
		if end < it.Offset+it.Length {
			break
		}
	}
	return dst
}

// cborNeg is CBOR's major type 1, a negative integer.
const cborNeg = 1 << 5

// appendCBORInt appends v as a CBOR integer.
func appendCBORInt(b []byte, v int) []byte {
	if v >= 0 {
		return appendCBORHead(b, cborUint, uint64(v))
	}
	return appendCBORHead(b, cborNeg, uint64(-1-v))
}

// appendCBORKeysBlock is appendCBORBlock with multimodal keys: extra is
// (lora?, (hash, off)..., salt?).
func appendCBORKeysBlock(b, parent []byte, tokens []uint32, lora string, keys []mmKey, salt string) []byte {
	b = append(appendCBORHead(append(b, cborArray|3), cborBytes, uint64(len(parent))), parent...)
	b = appendCBORUints(appendCBORHead(b, cborArray, uint64(len(tokens))), tokens)
	n := len(keys)
	if lora != "" {
		n++
	}
	if salt != "" {
		n++
	}
	b = appendCBORHead(b, cborArray, uint64(n))
	if lora != "" {
		b = appendCBORText(b, lora)
	}
	for _, k := range keys {
		b = appendCBORInt(appendCBORText(append(b, cborArray|2), k.hash), k.off)
	}
	if salt != "" {
		b = appendCBORText(b, salt)
	}
	return b
}

// saveInt saves an int as pickle's save_long does.
func (p *pickler) saveInt(v int) {
	p.boundary()
	switch {
	case v >= 0 && v <= 0xff:
		p.op(pkBinInt1, byte(v))
	case v >= 0 && v <= 0xffff:
		p.op(pkBinInt2, byte(v), byte(v>>8))
	case v >= -0x80000000 && v <= 0x7fffffff:
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], uint32(int32(v)))
		p.op(pkBinInt, w[0], w[1], w[2], w[3])
	default: // beyond any prompt: LONG1 of 8 bytes, two's complement
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], uint64(v))
		p.op(append([]byte{pkLong1, 8}, w[:]...)...)
	}
}

// appendPickleKeysBlock is appendPickleBlock with multimodal keys: extra
// is the tuple (lora?, (hash, off)..., salt?). Each str is a distinct
// Python object but the one-character ones CPython shares.
func appendPickleKeysBlock(b, parent []byte, tokens []uint32, lora string, keys []mmKey, salt string) []byte {
	p := newBlockPickler(b, parent, tokens)
	p.boundary() // the extra tuple
	// The shared strings saved, with their memo index: a second one is a
	// reference to the first.
	type saved struct {
		s    string
		memo int
	}
	var shared []saved
	save := func(s string) {
		ref := -1
		if sharedPyString(s) {
			if i := slices.IndexFunc(shared, func(e saved) bool { return e.s == s }); i >= 0 {
				ref = shared[i].memo
			} else {
				shared = append(shared, saved{s, p.memo})
			}
		}
		p.saveString(s, ref)
	}
	n := len(keys)
	if lora != "" {
		n++
	}
	if salt != "" {
		n++
	}
	if n > 3 {
		p.op(pkMark)
	}
	if lora != "" {
		save(lora)
	}
	for _, k := range keys {
		p.boundary()
		save(k.hash)
		p.saveInt(k.off)
		p.op(pkTuple2)
		p.memoize()
	}
	if salt != "" {
		save(salt)
	}
	if n > 3 {
		p.op(pkTuple)
	} else {
		p.op(pkTuple1 + byte(n-1))
	}
	p.memoize()
	p.op(pkTuple3)
	p.memoize()
	return p.finish()
}
