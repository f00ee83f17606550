package tokenizer

import (
	"hash/maphash"
	"math"
	"math/bits"
)

// strTable maps strings to ids in memory that holds no pointer, so the
// garbage collector never scans it: a Go map of a vocabulary's 150,000
// string keys cost every collection of a running kvrouter milliseconds of
// marking, for a table that never changes after loading.
type strTable struct {
	seed  maphash.Seed
	keys  []byte    // every key, back to back
	slots []strSlot // open addressing, linear probing; a power of two long
	n     int
}

type strSlot struct {
	off  uint32 // the key is keys[off : off+size-1]
	size uint32 // key length + 1; 0: empty slot
	id   uint32
	tag  uint32 // the hash's high bits, to skip most key comparisons
}

// newStrTable builds a table of m. It fails only when the keys do not fit
// 32-bit offsets.
func newStrTable(m map[string]uint32) (*strTable, bool) {
	t := &strTable{seed: maphash.MakeSeed(), n: len(m)}
	size := 0
	for k := range m {
		size += len(k)
	}
	if size >= math.MaxUint32 || len(m) >= math.MaxUint32/4 {
		return nil, false
	}
	t.keys = make([]byte, 0, size)
	t.slots = make([]strSlot, 1<<bits.Len(uint(2*len(m)|7)))
	mask := uint64(len(t.slots) - 1)
	for k, id := range m {
		h := maphash.String(t.seed, k)
		i := h & mask
		for t.slots[i].size != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = strSlot{off: uint32(len(t.keys)), size: uint32(len(k) + 1), id: id, tag: uint32(h >> 32)}
		t.keys = append(t.keys, k...)
	}
	return t, true
}

// get returns the id of key.
func (t *strTable) get(key string) (uint32, bool) {
	_, id, ok := t.slot(key)
	return id, ok
}

// slot returns the slot of key (an index below len(t.slots), one per key)
// and its id.
func (t *strTable) slot(key string) (slot int, id uint32, ok bool) {
	h := maphash.String(t.seed, key)
	mask := uint64(len(t.slots) - 1)
	tag, size := uint32(h>>32), uint32(len(key)+1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.size == 0 {
			return 0, 0, false
		}
		if s.tag == tag && s.size == size && string(t.keys[s.off:s.off+size-1]) == key {
			return int(i), s.id, true
		}
	}
}

// cap returns the number of slots.
func (t *strTable) cap() int { return len(t.slots) }

// len returns the number of keys.
func (t *strTable) len() int { return t.n }
