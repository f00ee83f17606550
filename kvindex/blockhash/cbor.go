package blockhash

import (
	"encoding/binary"
	"slices"
)

// A hand-written subset of canonical CBOR (RFC 8949): exactly the bytes
// cbor2.dumps(obj, canonical=True) produces for the objects vLLM hashes:
// definite-length arrays for tuples, shortest-form heads, byte strings, text
// strings and null. Python's cbor2 and fxamacker/cbor are the oracles.

// CBOR major types, shifted into the high bits of the initial byte.
const (
	cborUint  = 0 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborNull  = 0xf6
)

// appendCBORHead appends the initial byte of major type major with argument
// v, in its shortest form.
func appendCBORHead(b []byte, major byte, v uint64) []byte {
	switch {
	case v < 24:
		return append(b, major|byte(v))
	case v <= 0xff:
		return append(b, major|24, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, major|25), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, major|26), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, major|27), v)
	}
}

// appendCBORText appends s as a text string.
func appendCBORText(b []byte, s string) []byte {
	return append(appendCBORHead(b, cborText, uint64(len(s))), s...)
}

// appendCBORBlock appends cbor2.dumps((parent, tuple(tokens), extra),
// canonical=True), parent being the digest bytes, where extra is None, (lora,), (salt,) or (lora, salt), an
// empty string meaning absent.
func appendCBORBlock(b, parent []byte, tokens []uint32, lora, salt string) []byte {
	b = append(appendCBORHead(append(b, cborArray|3), cborBytes, uint64(len(parent))), parent...)
	b = appendCBORUints(appendCBORHead(b, cborArray, uint64(len(tokens))), tokens)
	switch {
	case lora == "" && salt == "":
		return append(b, cborNull)
	case salt == "":
		return appendCBORText(append(b, cborArray|1), lora)
	case lora == "":
		return appendCBORText(append(b, cborArray|1), salt)
	default:
		return appendCBORText(appendCBORText(append(b, cborArray|2), lora), salt)
	}
}

// cborMaxUint is the longest encoding of a token: a head with 4 bytes.
const cborMaxUint = 5

// appendCBORUints appends every token as an unsigned int.
func appendCBORUints(b []byte, tokens []uint32) []byte {
	o := len(b)
	b = slices.Grow(b, cborMaxUint*len(tokens))[:o+cborMaxUint*len(tokens)]
	for _, v := range tokens {
		w := b[o : o+cborMaxUint : o+cborMaxUint]
		switch {
		case v < 24:
			w[0] = byte(v)
			o++
		case v <= 0xff:
			w[0], w[1] = cborUint|24, byte(v)
			o += 2
		case v <= 0xffff:
			w[0] = cborUint | 25
			binary.BigEndian.PutUint16(w[1:], uint16(v))
			o += 3
		default:
			w[0] = cborUint | 26
			binary.BigEndian.PutUint32(w[1:], v)
			o += 5
		}
	}
	return b[:o]
}
