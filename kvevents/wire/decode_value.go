package wire

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The Decoder's primitives. Every declared length is checked against the
// bytes left in the payload before anything is read or allocated.

// arrayLen reads an array header; nil reads as an empty array.
func (d *Decoder) arrayLen() (int, error) {
	n, err := d.d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n > d.r.Len() { // every element takes at least one byte
		return 0, fmt.Errorf("%w: array of %d elements in %d bytes", ErrMalformed, n, d.r.Len())
	}
	return max(n, 0), nil
}

// mapLen reads a map header; nil reads as an empty map.
func (d *Decoder) mapLen() (int, error) {
	n, err := d.d.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if n > d.r.Len()/2 {
		return 0, fmt.Errorf("%w: map of %d entries in %d bytes", ErrMalformed, n, d.r.Len())
	}
	return max(n, 0), nil
}

// bytes reads a str or bin into the Decoder's scratch buffer, valid until
// the next read. nil reads as empty.
func (d *Decoder) bytes() ([]byte, error) {
	n, err := d.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return d.buf[:0], nil
	}
	if n > d.r.Len() {
		return nil, io.ErrUnexpectedEOF
	}
	if cap(d.buf) < n {
		d.buf = make([]byte, n)
	}
	d.buf = d.buf[:n]
	if err := d.d.ReadFull(d.buf); err != nil {
		return nil, err
	}
	return d.buf, nil
}

// str reads a string (or bin, or nil as "") into the scratch buffer.
func (d *Decoder) str() ([]byte, error) {
	c, err := d.d.PeekCode()
	if err != nil {
		return nil, err
	}
	if !isStrCode(c) && !isBinCode(c) && c != msgpcode.Nil {
		return nil, fmt.Errorf("%w: string of msgpack code %#x", ErrMalformed, c)
	}
	return d.bytes()
}

// internedStr reads a string and returns it from the intern table, so the
// few distinct media, kinds and LoRA names cost no allocation.
func (d *Decoder) internedStr() (string, error) {
	b, err := d.str()
	if err != nil || len(b) == 0 {
		return "", err
	}
	if s, ok := d.intern[string(b)]; ok {
		return s, nil
	}
	s := string(b)
	if len(d.intern) < maxInterned && len(s) <= 256 {
		d.intern[s] = s
	}
	return s, nil
}

func (d *Decoder) float() (float64, error) {
	if d.nilNext() {
		return 0, d.d.DecodeNil()
	}
	return d.d.DecodeFloat64()
}

// smallInt reads a non-negative int below 2^24, or nil as 0.
func (d *Decoder) smallInt(name string) (int, error) {
	if d.nilNext() {
		return 0, d.d.DecodeNil()
	}
	v, err := d.d.DecodeInt64()
	if err != nil {
		return 0, err
	}
	if v < 0 || v >= 1<<24 {
		return 0, fmt.Errorf("%w: %s %d out of range", ErrMalformed, name, v)
	}
	return int(v), nil
}

func (d *Decoder) peek() byte {
	c, err := d.d.PeekCode()
	if err != nil {
		return 0xc1 // never used by msgpack: matches no predicate
	}
	return c
}

func (d *Decoder) nilNext() bool { return d.peek() == msgpcode.Nil }

func (d *Decoder) strNext() bool { return isStrCode(d.peek()) }

func (d *Decoder) arrayNext() bool {
	c := d.peek()
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isStrCode(c byte) bool {
	return msgpcode.IsFixedString(c) || c == msgpcode.Str8 || c == msgpcode.Str16 || c == msgpcode.Str32
}

func isBinCode(c byte) bool {
	return c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32
}

func isMapCode(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// skipN skips n values.
func (d *Decoder) skipN(n, depth int) error {
	for range n {
		if err := d.skip(depth); err != nil {
			return err
		}
	}
	return nil
}

// skip skips one value of any type, refusing nesting deeper than maxDepth.
func (d *Decoder) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrMalformed, maxDepth)
	}
	c, err := d.d.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case d.arrayNext():
		n, err := d.arrayLen()
		if err != nil {
			return err
		}
		return d.skipN(n, depth+1)
	case isMapCode(c):
		n, err := d.mapLen()
		if err != nil {
			return err
		}
		return d.skipN(2*n, depth+1)
	case isStrCode(c) || isBinCode(c):
		n, err := d.d.DecodeBytesLen()
		if err != nil {
			return err
		}
		if n > d.r.Len() {
			return io.ErrUnexpectedEOF
		}
		_, err = d.r.Seek(int64(max(n, 0)), io.SeekCurrent)
		return err
	case isExtCode(c):
		return d.skipExt(c)
	default: // scalars, of fixed sizes
		return d.d.Skip()
	}
}

// skipExt skips an ext value after checking that its declared length is
// in the payload: the msgpack library reads a skipped ext into a buffer of
// up to 1 MiB before it finds the input short, so a 40-byte hostile batch
// would cost a megabyte of garbage.
func (d *Decoder) skipExt(c byte) error {
	var head, n int // bytes before the data (code, length, type), data length
	p, at := d.p, d.pos()
	switch c {
	case msgpcode.FixExt1, msgpcode.FixExt2, msgpcode.FixExt4, msgpcode.FixExt8, msgpcode.FixExt16:
		head, n = 2, 1<<(c-msgpcode.FixExt1)
	case msgpcode.Ext8:
		if at+2 > len(p) {
			return io.ErrUnexpectedEOF
		}
		head, n = 3, int(p[at+1])
	case msgpcode.Ext16:
		if at+3 > len(p) {
			return io.ErrUnexpectedEOF
		}
		head, n = 4, int(binary.BigEndian.Uint16(p[at+1:]))
	default: // Ext32
		if at+5 > len(p) {
			return io.ErrUnexpectedEOF
		}
		head, n = 6, int(binary.BigEndian.Uint32(p[at+1:]))
	}
	if head+n > len(p)-at {
		return io.ErrUnexpectedEOF
	}
	return d.seek(at + head + n)
}

func isExtCode(c byte) bool {
	return (c >= msgpcode.FixExt1 && c <= msgpcode.FixExt16) || (c >= msgpcode.Ext8 && c <= msgpcode.Ext32)
}

// pos is the offset of the next unread byte of the payload.
func (d *Decoder) pos() int { return len(d.p) - d.r.Len() }

// seek moves the read position to offset pos of the payload.
func (d *Decoder) seek(pos int) error {
	_, err := d.r.Seek(int64(pos), io.SeekStart)
	return err
}

// uintAt decodes the msgpack integer at p[i:] in place, the hot path for
// token ids and hashes: its value (two's complement for negative ones), the
// offset after it, whether it was negative, and false when p[i:] does not
// start with a whole integer.
func uintAt(p []byte, i int) (v uint64, next int, neg, ok bool) {
	if i >= len(p) {
		return 0, i, false, false
	}
	c := p[i]
	if c <= msgpcode.PosFixedNumHigh {
		return uint64(c), i + 1, false, true
	}
	if c >= msgpcode.NegFixedNumLow {
		return uint64(int64(int8(c))), i + 1, true, true
	}
	var size int
	switch c {
	case msgpcode.Uint8, msgpcode.Int8:
		size = 1
	case msgpcode.Uint16, msgpcode.Int16:
		size = 2
	case msgpcode.Uint32, msgpcode.Int32:
		size = 4
	case msgpcode.Uint64, msgpcode.Int64:
		size = 8
	default:
		return 0, i, false, false
	}
	if len(p)-i-1 < size {
		return 0, i, false, false
	}
	b := p[i+1 : i+1+size]
	switch size {
	case 1:
		v = uint64(b[0])
	case 2:
		v = uint64(binary.BigEndian.Uint16(b))
	case 4:
		v = uint64(binary.BigEndian.Uint32(b))
	default:
		v = binary.BigEndian.Uint64(b)
	}
	if c >= msgpcode.Int8 { // signed: sign-extend from size bytes
		shift := uint(64 - 8*size)
		v = uint64(int64(v<<shift) >> shift)
		neg = int64(v) < 0
	}
	return v, i + 1 + size, neg, true
}
