package wire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// ErrMalformed is wrapped by every error of Decode about the payload's shape
// (as opposed to msgpack syntax or truncation, reported as they come).
var ErrMalformed = errors.New("wire: malformed batch")

// maxDepth bounds the nesting of values the decoder skips, so hostile input
// cannot exhaust the stack.
const maxDepth = 16

// maxInterned bounds the decoder's table of interned strings (media, group
// kinds, LoRA names).
const maxInterned = 256

// Decoder decodes vLLM's msgpack event batches. It holds buffers reused from
// one batch to the next, so decoding allocates nothing in steady state. A
// Decoder is not safe for concurrent use; the zero value is not usable, call
// NewDecoder.
type Decoder struct {
	p      []byte // the payload being decoded
	r      bytes.Reader
	d      *msgpack.Decoder
	batch  Batch
	spans  []span // one per event of batch.Events
	hashes []uint64
	digs   []blockhash.Digest
	tokens []uint32
	extras []extraSpan
	blocks []BlockExtra
	strs   []string
	buf    []byte
	intern map[string]string
}

// span locates one event's data in the Decoder's flat buffers.
type span struct {
	hashLo, hashHi   int32
	digLo, digHi     int32 // digHi < 0: not every hash was a full digest
	tokLo, tokHi     int32
	extraLo, extraHi int32 // extraHi < 0: no extra_keys
}

type extraSpan struct {
	lo, hi int32
	opaque bool
}

// NewDecoder returns a Decoder with empty buffers.
func NewDecoder() *Decoder {
	d := &Decoder{intern: make(map[string]string)}
	d.d = msgpack.NewDecoder(&d.r)
	return d
}

// Decode decodes one payload. The returned batch and its events' slices
// alias the Decoder's buffers and are valid until the next call. Decode
// accepts every wire form of vLLM's releases (see the package doc); it
// returns an error, never panics, for malformed or truncated input, and its
// memory use is bounded by the payload's size.
func (d *Decoder) Decode(payload []byte) (*Batch, error) {
	d.trim()
	d.p = payload
	d.r.Reset(payload)
	d.d.Reset(&d.r)
	d.batch = Batch{Events: d.batch.Events[:0]}
	d.spans = d.spans[:0]
	d.hashes, d.digs, d.tokens = d.hashes[:0], d.digs[:0], d.tokens[:0]
	d.extras, d.blocks, d.strs = d.extras[:0], d.blocks[:0], d.strs[:0]
	if err := d.outer(); err != nil {
		return nil, fmt.Errorf("wire: decode batch: %w", err)
	}
	d.fixup()
	return &d.batch, nil
}

// maxRetained bounds the elements a buffer keeps between batches, so one
// huge batch does not pin its memory for the life of the Decoder.
const maxRetained = 1 << 16

func (d *Decoder) trim() {
	if cap(d.tokens) > maxRetained || cap(d.hashes) > maxRetained || cap(d.buf) > maxRetained ||
		cap(d.digs) > maxRetained/32 || cap(d.batch.Events) > maxRetained/16 || cap(d.strs) > maxRetained {
		*d = Decoder{d: d.d, intern: d.intern}
	}
}

// fixup points every event's slices into the (now final) flat buffers.
func (d *Decoder) fixup() {
	for i := range d.batch.Events {
		e, s := &d.batch.Events[i], &d.spans[i]
		if s.hashHi > s.hashLo {
			e.Hashes = d.hashes[s.hashLo:s.hashHi:s.hashHi]
		}
		if s.digHi > s.digLo {
			e.Digests = d.digs[s.digLo:s.digHi:s.digHi]
		}
		if s.tokHi > s.tokLo {
			e.Tokens = d.tokens[s.tokLo:s.tokHi:s.tokHi]
		}
		if s.extraHi >= 0 {
			lo := len(d.blocks)
			for _, x := range d.extras[s.extraLo:s.extraHi] {
				var keys []string
				if x.hi > x.lo {
					keys = d.strs[x.lo:x.hi:x.hi]
				}
				d.blocks = append(d.blocks, BlockExtra{Keys: keys, Opaque: x.opaque})
			}
			e.ExtraKeys = d.blocks[lo:len(d.blocks):len(d.blocks)]
		}
	}
}

// outer decodes the batch: [ts, events, dp_rank?] or {ts, events, data_parallel_rank}.
func (d *Decoder) outer() error {
	c, err := d.d.PeekCode()
	if err != nil {
		return err
	}
	if isMapCode(c) {
		return d.outerMap()
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 2 {
		return fmt.Errorf("%w: outer array of %d elements, want 2 or more", ErrMalformed, n)
	}
	if d.batch.TS, err = d.float(); err != nil {
		return err
	}
	if err := d.events(); err != nil {
		return err
	}
	if n >= 3 {
		if err := d.rank(); err != nil {
			return err
		}
	}
	return d.skipN(n-3, 0)
}

func (d *Decoder) outerMap() error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	for range n {
		key, err := d.str()
		if err != nil {
			return err
		}
		switch string(key) {
		case "ts":
			d.batch.TS, err = d.float()
		case "events":
			err = d.events()
		case "data_parallel_rank":
			err = d.rank()
		default:
			err = d.skip(0)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) rank() error {
	if d.nilNext() {
		return d.d.DecodeNil()
	}
	r, err := d.d.DecodeInt64()
	if err != nil {
		return err
	}
	if r < 0 || r > 1<<16 {
		return fmt.Errorf("%w: data_parallel_rank %d", ErrMalformed, r)
	}
	d.batch.DPRank, d.batch.HasDPRank = int(r), true
	return nil
}

func (d *Decoder) events() error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	for range n {
		c, err := d.d.PeekCode()
		if err != nil {
			return err
		}
		var e Event
		s := span{digHi: -1, extraHi: -1}
		switch {
		case isMapCode(c):
			err = d.mapEvent(&e, &s)
		case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
			err = d.arrayEvent(&e, &s)
		default:
			err = fmt.Errorf("%w: event of msgpack code %#x, want an array or a map", ErrMalformed, c)
		}
		if err != nil {
			return err
		}
		if e.Type == 0 {
			d.batch.Skipped++
			continue
		}
		d.batch.Events = append(d.batch.Events, e)
		d.spans = append(d.spans, s)
	}
	return nil
}
