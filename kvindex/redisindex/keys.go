package redisindex

import (
	"encoding/binary"
	"strconv"
)

// nsTag is a namespace's hash tag body: FNV-1a of the model name in hex, so
// that no model name can break a tag.
func nsTag(namespace string) string { return strconv.FormatUint(fnv1a(namespace), 16) }

// fnv1a is the 64-bit FNV-1a hash of s.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// group is the slot group of block h.
func (x *Index) group(h uint64) int { return int(h % uint64(x.cfg.Groups)) }

// blockKey is the key of block h in the namespace with tag tag.
func (x *Index) blockKey(buf []byte, tag string, h uint64) []byte {
	buf = append(buf, x.cfg.Prefix...)
	buf = append(buf, '{')
	buf = append(buf, tag...)
	buf = append(buf, ':')
	buf = strconv.AppendUint(buf, h%uint64(x.cfg.Groups), 16)
	buf = append(buf, "}b:"...)
	return strconv.AppendUint(buf, h, 16)
}

// podsKey is the key of a namespace's pod table: name → "<num>:<epoch>".
func (x *Index) podsKey(tag string) string {
	return x.cfg.Prefix + "{" + tag + "}p"
}

// leaseKey is the key of a pod's writer lease.
func (x *Index) leaseKey(pod string) string {
	return x.cfg.Prefix + "lease:{" + pod + "}"
}

// A block key's value is a sequence of 16-byte records, appended:
//
//	[0:4]  the pod's number in its namespace's pod table, little-endian
//	[4]    kind: 0–3 a tier (a real holder), 4 speculative
//	[5]    real: a count delta, a signed byte (+n stored, -1 removed);
//	       speculative: 0 a decision's speculation, 1 its settling
//	[6:8]  zero
//	[8:16] real: the pod's epoch; speculative: the deadline in unix ms
//
// Readers fold a pod's real records of its current epoch in order, the
// count never going below zero (a removal of an absent block is ignored,
// as kvindex ignores it), and its speculative records as specState does.
const (
	recordSize = 16
	kindSpec   = 4
	specSettle = 1 // a speculative record's [5]: Settle's
)

// specState is one pod's speculative holder of one block as its records
// fold, in order, to what kvindex's own holder would be: a speculation
// sets the deadline (a new one, should the pod have one already); a
// settling shortens the one pending, if any, and creates none; the pod's
// GPU store of the block confirms it (real, no longer speculative); a
// clear (a new epoch) drops it. Records carry no epoch: one written before
// the pod's current epoch began, its deadline less the life it was given
// (kvindex.Config.SpeculativeTTL, or SpeculativeGrace for a settling)
// before the epoch, is the pod's from before its clear. The epoch is the
// clearing replica's clock in ms, so another replica's clock skew errs by
// as much; a deadline of 0 is none.
type specState struct{ pending, settled uint64 }

// specLives is the lives speculative records are given, in ms.
type specLives struct{ ttl, grace uint64 }

// lives is the lives this replica gives its speculative records.
func (x *Index) lives() specLives {
	return specLives{uint64(x.spec.SpeculativeTTL.Milliseconds()), uint64(x.spec.SpeculativeGrace.Milliseconds())}
}

// apply folds the speculative record (settle: Settle's) of deadline v of
// a pod whose current epoch is epoch.
func (s *specState) apply(settle bool, v, epoch uint64, l specLives) {
	switch {
	case !settle:
		if v >= epoch+l.ttl {
			*s = specState{pending: v}
		}
	case s.pending != 0 && v >= epoch+l.grace && (s.settled == 0 || v < s.settled):
		s.settled = v
	}
}

// deadline is when the holder stops counting; 0: there is none.
func (s specState) deadline() uint64 {
	if s.settled != 0 && s.settled < s.pending {
		return s.settled
	}
	return s.pending
}

func appendRecord(buf []byte, num uint32, kind uint8, delta int8, v uint64) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, num)
	buf = append(buf, kind, byte(delta), 0, 0)
	return binary.LittleEndian.AppendUint64(buf, v)
}

// record is one decoded record.
type record struct {
	num   uint32
	kind  uint8
	delta int8
	v     uint64
}

// decodeRecord reads the record at the start of b, which holds at least
// recordSize bytes; ok is false for one of no known shape.
func decodeRecord[B string | []byte](b B) (r record, ok bool) {
	_ = b[recordSize-1]
	r.num = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	r.kind, r.delta = b[4], int8(b[5])
	for i := 15; i >= 8; i-- {
		r.v = r.v<<8 | uint64(b[i])
	}
	return r, knownRecord(r.kind, r.delta, b[6] == 0 && b[7] == 0)
}

// knownRecord says whether a record of kind and delta byte, its bytes
// [6:8] zero or not, is of a known shape: a tier's, or a speculation's or
// a settling's. (kindSummary headers are told apart before.)
func knownRecord(kind uint8, delta int8, zero bool) bool {
	return zero && (kind < kindSpec || kind == kindSpec && (delta == 0 || delta == specSettle))
}

// podEntry is a pod's entry in its namespace's pod table.
type podEntry struct {
	num uint32
	// epoch is the current one, which the holder writes under and its
	// clears must name (the lease's fencing token); the pod's real records
	// count from base to epoch: a lease taken over keeps the previous
	// holders' records (base below epoch), a clear starts afresh (base =
	// epoch).
	epoch, base uint64
	// version is the pod table's "#ver" at the pod's last clear.
	version uint64
}

// parsePodEntry reads a pod table value "<num>:<epoch>:<version>:<base>"
// (or "<num>:<epoch>:<version>", or "<num>:<epoch>" with version 0; base
// then the epoch): decimal digits, the number in [1, 2³²), the epoch in
// [1, 2⁶³), the version in [0, 2⁶³), the base in [1, epoch].
func parsePodEntry[B string | []byte](s B) (e podEntry, ok bool) {
	var parts [4]uint64
	n, ok := parseFields(s, parts[:], 1<<63-1)
	if !ok || n < 2 || parts[0] == 0 || parts[0] > 1<<32-1 || parts[1] == 0 {
		return podEntry{}, false
	}
	e = podEntry{num: uint32(parts[0]), epoch: parts[1], version: parts[2], base: parts[1]}
	if n == 4 {
		if parts[3] == 0 || parts[3] > parts[1] {
			return podEntry{}, false
		}
		e.base = parts[3]
	}
	return e, true
}

// appendFields appends vs to buf as decimal fields separated by ':', as
// parseFields reads them.
func appendFields(buf []byte, vs ...int64) []byte {
	for i, v := range vs {
		if i > 0 {
			buf = append(buf, ':')
		}
		buf = strconv.AppendInt(buf, v, 10)
	}
	return buf
}

// parseFields reads decimal fields separated by ':' into parts, each at
// most limit: how many it read, false for an empty field, a field past
// limit, or more fields than parts holds.
func parseFields[B string | []byte](s B, parts []uint64, limit uint64) (n int, ok bool) {
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != ':' {
			continue
		}
		if n == len(parts) || i == start {
			return 0, false
		}
		if parts[n], ok = parseDecimal(s[start:i], limit); !ok {
			return 0, false
		}
		n, start = n+1, i+1
	}
	return n, true
}

// parseDecimal reads decimal digits, reporting false past limit.
func parseDecimal[B string | []byte](s B, limit uint64) (uint64, bool) {
	var v uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i]) - '0'
		if d > 9 || v > (limit-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
