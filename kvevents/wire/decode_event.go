package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// field names one event field the decoder understands.
type field uint8

const (
	fSkip field = iota
	fHashes
	fParent
	fTokens
	fBlockSize
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fWindow
	fMMKeys
)

// Positional layouts (msgspec array_like, tag first): index i of the array
// holds layout[i-1]. Trailing fields with default values may be omitted and
// newer releases append fields, so every index is guarded.
var (
	storedLayout = []field{
		fHashes, fParent, fTokens, fBlockSize, fSkip /* lora_id */, fMedium,
		fLoRAName, fExtraKeys, fGroupIdx, fSpecKind, fWindow,
	}
	removedLayout = []field{fHashes, fMedium, fGroupIdx}
)

// fieldByName maps a map-form event key to its field.
func fieldByName(key []byte) field {
	switch string(key) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRAName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroupIdx
	case "kv_cache_spec_kind":
		return fSpecKind
	case "kv_cache_spec_sliding_window":
		return fWindow
	case "mm_keys":
		return fMMKeys
	default:
		return fSkip
	}
}

func typeByTag(tag []byte) EventType {
	switch string(tag) {
	case "BlockStored":
		return BlockStored
	case "BlockRemoved":
		return BlockRemoved
	case "AllBlocksCleared":
		return AllBlocksCleared
	default:
		return 0
	}
}

// arrayEvent decodes ["Tag", field...]. An unknown tag leaves e.Type 0.
func (d *Decoder) arrayEvent(e *Event, s *span) error {
	n, err := d.arrayLen()
	if err != nil || n == 0 {
		return err
	}
	tag, err := d.str()
	if err != nil {
		return err
	}
	typ := typeByTag(tag)
	var layout []field
	switch typ {
	case BlockStored:
		layout = storedLayout
	case BlockRemoved:
		layout = removedLayout
	}
	for i := 1; i < n; i++ {
		f := fSkip
		if i-1 < len(layout) {
			f = layout[i-1]
		}
		if err := d.field(e, s, f); err != nil {
			return err
		}
	}
	e.Type = typ
	return nil
}

// mapEvent decodes {"type": "Tag", name: value...}; the type key may come
// anywhere, so fields are decoded before the type is known.
func (d *Decoder) mapEvent(e *Event, s *span) error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	var typ EventType
	for range n {
		key, err := d.str()
		if err != nil {
			return err
		}
		if string(key) == "type" {
			tag, err := d.str()
			if err != nil {
				return err
			}
			typ = typeByTag(tag)
			continue
		}
		if err := d.field(e, s, fieldByName(key)); err != nil {
			return err
		}
	}
	e.Type = typ
	return nil
}

func (d *Decoder) field(e *Event, s *span, f field) error {
	var err error
	switch f {
	case fHashes:
		err = d.hashList(s)
	case fParent:
		err = d.parent(e)
	case fTokens:
		err = d.tokenList(s)
	case fBlockSize:
		e.BlockSize, err = d.smallInt("block_size")
	case fGroupIdx:
		e.GroupIdx, err = d.smallInt("group_idx")
	case fMedium:
		e.Medium, err = d.internedStr()
	case fLoRAName:
		e.LoRAName, err = d.internedStr()
	case fSpecKind:
		e.SpecKind, err = d.internedStr()
	case fWindow:
		e.SlidingWindow, err = d.smallInt("kv_cache_spec_sliding_window")
	case fExtraKeys:
		err = d.extraKeys(s)
	case fMMKeys:
		err = d.mmKeys(e)
	default:
		err = d.skip(0)
	}
	return err
}

// hash decodes one block hash: an unsigned integer of any width, or raw
// digest bytes reduced to their last 8 bytes big-endian. full is the digest
// when the bytes were exactly 32 (SHA-256) or 16 (xxh3_128).
func (d *Decoder) hash() (v uint64, full *blockhash.Digest, err error) {
	c, err := d.d.PeekCode()
	if err != nil {
		return 0, nil, err
	}
	switch {
	case c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32:
		b, err := d.bytes()
		if err != nil {
			return 0, nil, err
		}
		if dg, err := blockhash.DigestFromBytes(b); err == nil {
			return dg.Value(), &dg, nil
		}
		var tail [8]byte
		copy(tail[8-min(8, len(b)):], b[max(0, len(b)-8):])
		return binary.BigEndian.Uint64(tail[:]), nil, nil
	case msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64):
		v, err := d.d.DecodeUint64()
		return v, nil, err
	default:
		return 0, nil, fmt.Errorf("%w: block hash of msgpack code %#x", ErrMalformed, c)
	}
}

func (d *Decoder) hashList(s *span) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	s.hashLo, s.digLo, s.digHi = int32(len(d.hashes)), int32(len(d.digs)), int32(len(d.digs))
	pos := d.pos()
	for range n {
		if v, next, _, ok := uintAt(d.p, pos); ok { // the common case, read in place
			d.hashes, pos, s.digHi = append(d.hashes, v), next, -1
			continue
		}
		if err := d.seek(pos); err != nil {
			return err
		}
		v, full, err := d.hash()
		if err != nil {
			return err
		}
		d.hashes, pos = append(d.hashes, v), d.pos()
		if full != nil && s.digHi >= 0 {
			d.digs = append(d.digs, *full)
			s.digHi++
		} else {
			s.digHi = -1
		}
	}
	s.hashHi = int32(len(d.hashes))
	return d.seek(pos)
}

func (d *Decoder) parent(e *Event) error {
	if d.nilNext() {
		e.HasParent = false
		return d.d.DecodeNil()
	}
	v, full, err := d.hash()
	if err != nil {
		return err
	}
	e.Parent, e.HasParent = v, true
	if full != nil {
		e.ParentDigest, e.HasParentDigest = *full, true
	}
	return nil
}

func (d *Decoder) tokenList(s *span) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	lo := len(d.tokens)
	s.tokLo = int32(lo)
	d.tokens = slices.Grow(d.tokens, n)[:lo+n]
	toks, p, pos := d.tokens[lo:], d.p, d.pos()
	for k := range toks {
		// Token ids are fixints, uint8, uint16 or uint32: read those inline.
		if pos < len(p) && p[pos] <= msgpcode.PosFixedNumHigh {
			toks[k], pos = uint32(p[pos]), pos+1
			continue
		}
		if pos+1 < len(p) && p[pos] == msgpcode.Uint8 {
			toks[k], pos = uint32(p[pos+1]), pos+2
			continue
		}
		if pos+2 < len(p) && p[pos] == msgpcode.Uint16 {
			toks[k], pos = uint32(binary.BigEndian.Uint16(p[pos+1:])), pos+3
			continue
		}
		if pos+4 < len(p) && p[pos] == msgpcode.Uint32 {
			toks[k], pos = binary.BigEndian.Uint32(p[pos+1:]), pos+5
			continue
		}
		v, next, neg, ok := uintAt(p, pos)
		switch {
		case !ok && pos >= len(p):
			return io.ErrUnexpectedEOF
		case !ok:
			return fmt.Errorf("%w: token id of msgpack code %#x", ErrMalformed, p[pos])
		case neg || v > math.MaxUint32:
			return fmt.Errorf("%w: token id %d out of range", ErrMalformed, int64(v))
		}
		toks[k], pos = uint32(v), next
	}
	s.tokHi = int32(len(d.tokens))
	return d.seek(pos)
}

// extraKeys decodes the per-block list of extra-key tuples (or nil).
// mmKeys reads TensorRT-LLM's mm_keys, one list of multimodal segments
// per block: Event.MultimodalFrom names the first block with any.
func (d *Decoder) mmKeys(e *Event) error {
	if d.nilNext() {
		return d.skip(0)
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	for i := range n {
		if e.MultimodalFrom == 0 && d.arrayNext() {
			m, err := d.arrayLen()
			if err != nil {
				return err
			}
			if m > 0 {
				e.MultimodalFrom = i + 1
			}
			for range m {
				if err := d.skip(1); err != nil {
					return err
				}
			}
			continue
		}
		if err := d.skip(1); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) extraKeys(s *span) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	s.extraLo = int32(len(d.extras))
	for range n {
		x := extraSpan{lo: int32(len(d.strs))}
		m, err := 0, error(nil)
		if d.arrayNext() || d.nilNext() {
			m, err = d.arrayLen() // nil: no keys
		} else {
			x.opaque, err = true, d.skip(1)
		}
		if err != nil {
			return err
		}
		for range m {
			if !d.strNext() {
				x.opaque = true
				if err := d.skip(1); err != nil {
					return err
				}
				continue
			}
			k, err := d.internedStr()
			if err != nil {
				return err
			}
			d.strs = append(d.strs, k)
		}
		x.hi = int32(len(d.strs))
		d.extras = append(d.extras, x)
	}
	s.extraHi = int32(len(d.extras))
	return nil
}
