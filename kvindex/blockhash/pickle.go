package blockhash

import (
	"encoding/binary"
	"slices"
	"unicode/utf8"
)

// A hand-written subset of CPython's pickler, protocol 5: exactly the bytes
// pickle.dumps(obj, protocol=5) produces for the objects vLLM hashes: a seed
// string, and a block tuple (bytes, tuple of non-negative ints, None or a
// tuple of 1–2 strings). Python is the oracle (see hash_oracle_test.go).

// Pickle opcodes used here.
const (
	pkProto           = 0x80
	pkFrame           = 0x95
	pkStop            = '.'
	pkMark            = '('
	pkNone            = 'N'
	pkBinInt          = 'J'
	pkBinInt1         = 'K'
	pkBinInt2         = 'M'
	pkLong1           = 0x8a
	pkEmptyTuple      = ')'
	pkTuple           = 't'
	pkTuple1          = 0x85
	pkTuple2          = 0x86
	pkTuple3          = 0x87
	pkShortBinBytes   = 'C'
	pkShortBinUnicode = 0x8c
	pkBinUnicode      = 'X'
	pkBinUnicode8     = 0x8d
	pkMemoize         = 0x94
	pkBinGet          = 'h'
)

const (
	// pkFrameHeader is the size of a FRAME opcode with its 8-byte length.
	pkFrameHeader = 9
	// pkFrameTarget: once a frame holds this many bytes, CPython ends it
	// before saving the next object; bytes and strings at least this long are
	// written outside any frame.
	pkFrameTarget = 64 * 1024
	// pkFrameMin: a frame shorter than this loses its FRAME header.
	pkFrameMin = 4
)

// pickler appends one pickle to b, reproducing CPython's framing: a frame is
// opened by the first write after the previous one was committed, committed
// (its header filled in) when a save starts with the frame at
// pkFrameTarget bytes or more, before a large bytes or string object, and at
// the end.
type pickler struct {
	b     []byte
	frame int // offset of the open frame's header in b, or -1
	memo  int // number of memoized objects
}

func newPickler(b []byte) pickler {
	return pickler{b: append(b, pkProto, 5), frame: -1}
}

// open makes sure a frame is open before a write.
func (p *pickler) open() {
	if p.frame < 0 {
		p.frame = len(p.b)
		p.b = append(p.b, pkFrame, 0, 0, 0, 0, 0, 0, 0, 0)
	}
}

// commit closes the open frame, if any.
func (p *pickler) commit() {
	if p.frame < 0 {
		return
	}
	n := len(p.b) - p.frame - pkFrameHeader
	if n >= pkFrameMin {
		binary.LittleEndian.PutUint64(p.b[p.frame+1:], uint64(n))
	} else {
		copy(p.b[p.frame:], p.b[p.frame+pkFrameHeader:])
		p.b = p.b[:len(p.b)-pkFrameHeader]
	}
	p.frame = -1
}

// boundary is what CPython does at the start of saving every object.
func (p *pickler) boundary() {
	if p.frame >= 0 && len(p.b)-p.frame-pkFrameHeader >= pkFrameTarget {
		p.commit()
	}
}

// op writes opcodes (and their arguments) inside a frame.
func (p *pickler) op(bs ...byte) {
	p.open()
	p.b = append(p.b, bs...)
}

func (p *pickler) memoize() {
	p.op(pkMemoize)
	p.memo++
}

// finish writes STOP, commits the frame and returns the pickle.
func (p *pickler) finish() []byte {
	p.op(pkStop)
	p.commit()
	return p.b
}

// pkMaxInt is the longest encoding of a token: LONG1 with 5 bytes.
const pkMaxInt = 7

// saveInts saves each token as an int, as pickle's save_long does. It checks
// the frame boundary once per run of tokens that cannot reach the frame
// target, which is exact and keeps the loop tight.
func (p *pickler) saveInts(tokens []uint32) {
	for len(tokens) > 0 {
		p.boundary()
		p.open()
		room := pkFrameTarget - (len(p.b) - p.frame - pkFrameHeader)
		run := tokens[:min(len(tokens), (room+pkMaxInt-1)/pkMaxInt)]
		p.b = appendPickleInts(p.b, run)
		tokens = tokens[len(run):]
	}
}

// appendPickleInts appends the opcode of every token, a non-negative int.
func appendPickleInts(b []byte, tokens []uint32) []byte {
	o := len(b)
	b = slices.Grow(b, pkMaxInt*len(tokens))[:o+pkMaxInt*len(tokens)]
	for _, v := range tokens {
		w := b[o : o+pkMaxInt : o+pkMaxInt]
		switch {
		case v <= 0xff:
			w[0], w[1] = pkBinInt1, byte(v)
			o += 2
		case v <= 0xffff:
			w[0], w[1], w[2] = pkBinInt2, byte(v), byte(v>>8)
			o += 3
		case v <= 0x7fffffff:
			w[0] = pkBinInt
			binary.LittleEndian.PutUint32(w[1:], v)
			o += 5
		default: // two's complement needs a fifth, zero, byte
			w[0], w[1], w[6] = pkLong1, 5, 0
			binary.LittleEndian.PutUint32(w[2:], v)
			o += 7
		}
	}
	return b[:o]
}

// saveString saves a str and memoizes it. A str that is the same Python
// object as an earlier one (at memo index ref ≥ 0) is a BINGET of it instead.
func (p *pickler) saveString(s string, ref int) {
	p.boundary()
	if ref >= 0 {
		p.op(pkBinGet, byte(ref)) // ref < 256 here: a block has few memo entries
		return
	}
	n := len(s)
	var head [9]byte
	var h []byte
	switch {
	case n < 256:
		h = append(head[:0], pkShortBinUnicode, byte(n))
	case uint64(n) < 1<<32:
		h = binary.LittleEndian.AppendUint32(append(head[:0], pkBinUnicode), uint32(n))
	default:
		h = binary.LittleEndian.AppendUint64(append(head[:0], pkBinUnicode8), uint64(n))
	}
	if n >= pkFrameTarget {
		p.commit() // large payloads go outside any frame
		p.b = append(append(p.b, h...), s...)
	} else {
		p.op(h...)
		p.b = append(p.b, s...)
	}
	p.memoize()
}

// saveTokens saves tuple(tokens).
func (p *pickler) saveTokens(tokens []uint32) {
	p.boundary()
	switch n := len(tokens); {
	case n == 0:
		p.op(pkEmptyTuple) // the empty tuple is not memoized
		return
	case n <= 3:
		p.saveInts(tokens)
		p.op(pkTuple1 + byte(n-1))
	default:
		p.op(pkMark)
		p.saveInts(tokens)
		p.op(pkTuple)
	}
	p.memoize()
}

// saveExtra saves the extra keys: None, (lora,), (salt,) or (lora, salt).
func (p *pickler) saveExtra(lora, salt string) {
	p.boundary()
	switch {
	case lora == "" && salt == "":
		p.op(pkNone)
		return
	case salt == "":
		p.saveString(lora, -1)
		p.op(pkTuple1)
	case lora == "":
		p.saveString(salt, -1)
		p.op(pkTuple1)
	default:
		loraRef := p.memo
		p.saveString(lora, -1)
		ref := -1
		if lora == salt && sharedPyString(lora) {
			ref = loraRef
		}
		p.saveString(salt, ref)
		p.op(pkTuple2)
	}
	p.memoize()
}

// sharedPyString reports whether CPython represents every str equal to s by
// one shared object, so that pickle's memo turns a second occurrence into a
// reference: the one-character strings below U+0100. (Equal longer strings
// from a request's fields are distinct objects.)
func sharedPyString(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n == len(s) && r < 0x100
}

// appendPickleBlock appends pickle.dumps((parent, tuple(tokens), extra), 5)
// where extra is None, (lora,), (salt,) or (lora, salt), an empty string
// meaning absent.
func appendPickleBlock(b, parent []byte, tokens []uint32, lora, salt string) []byte {
	if pkMaxInt*len(tokens)+len(lora)+len(salt)+64 < pkFrameTarget {
		return appendPickleSmallBlock(b, parent, tokens, lora, salt)
	}
	return appendPickleFramedBlock(b, parent, tokens, lora, salt)
}

// newBlockPickler starts the pickle of a block's tuple: the parent bytes
// and tuple(tokens), the extra keys to follow.
func newBlockPickler(b, parent []byte, tokens []uint32) pickler {
	p := newPickler(b)
	p.boundary() // the outer tuple
	p.boundary() // the parent bytes
	p.op(pkShortBinBytes, byte(len(parent)))
	p.b = append(p.b, parent...)
	p.memoize()
	p.saveTokens(tokens)
	return p
}

// appendPickleFramedBlock is appendPickleBlock for any block, with CPython's
// framing rules for pickles beyond one frame.
func appendPickleFramedBlock(b, parent []byte, tokens []uint32, lora, salt string) []byte {
	p := newBlockPickler(b, parent, tokens)
	p.saveExtra(lora, salt)
	p.op(pkTuple3)
	p.memoize()
	return p.finish()
}

// appendPickleSmallBlock is appendPickleBlock for the usual block, whose
// pickle fits one frame: straight-line code with no frame bookkeeping.
func appendPickleSmallBlock(b, parent []byte, tokens []uint32, lora, salt string) []byte {
	start := len(b)
	b = append(b, pkProto, 5, pkFrame, 0, 0, 0, 0, 0, 0, 0, 0, pkShortBinBytes, byte(len(parent)))
	b = append(append(b, parent...), pkMemoize)
	memo := 1
	switch n := len(tokens); {
	case n == 0:
		b = append(b, pkEmptyTuple) // the empty tuple is not memoized
	case n <= 3:
		b = append(appendPickleInts(b, tokens), pkTuple1+byte(n-1), pkMemoize)
		memo++
	default:
		b = append(appendPickleInts(append(b, pkMark), tokens), pkTuple, pkMemoize)
		memo++
	}
	switch {
	case lora == "" && salt == "":
		b = append(b, pkNone)
	case salt == "":
		b = append(appendPickleSmallString(b, lora), pkTuple1, pkMemoize)
	case lora == "":
		b = append(appendPickleSmallString(b, salt), pkTuple1, pkMemoize)
	default:
		b = appendPickleSmallString(b, lora)
		if lora == salt && sharedPyString(lora) {
			b = append(b, pkBinGet, byte(memo))
		} else {
			b = appendPickleSmallString(b, salt)
		}
		b = append(b, pkTuple2, pkMemoize)
	}
	b = append(b, pkTuple3, pkMemoize, pkStop)
	binary.LittleEndian.PutUint64(b[start+3:], uint64(len(b)-start-2-pkFrameHeader))
	return b
}

// appendPickleSmallString appends a memoized str shorter than the frame
// target.
func appendPickleSmallString(b []byte, s string) []byte {
	if len(s) < 256 {
		b = append(b, pkShortBinUnicode, byte(len(s)))
	} else {
		b = binary.LittleEndian.AppendUint32(append(b, pkBinUnicode), uint32(len(s)))
	}
	return append(append(b, s...), pkMemoize)
}

// appendPickleString appends pickle.dumps(s, protocol=5).
func appendPickleString(b []byte, s string) []byte {
	p := newPickler(b)
	p.saveString(s, -1)
	return p.finish()
}
