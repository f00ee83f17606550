package extproc

import (
	"math/bits"
	"strconv"
	"sync"
)

// The request body buffers a Server recycles: powers of two from 4 KiB to
// 1 MiB. 1 MiB is also the most a content-length header makes a stream
// allocate before the bytes arrive, whatever it claims; a longer body
// grows as it comes and is left to the collector.
const (
	minBodyShift = 12
	maxBodyShift = 20
	maxBodyHint  = 1 << maxBodyShift
)

// bodyPool recycles request body buffers across streams by capacity.
// A buffer is put back only once nothing can reference it: see
// stream.releaseBody.
type bodyPool struct {
	classes [maxBodyShift - minBodyShift + 1]sync.Pool // *[]byte of capacity 1<<(minBodyShift+i)
	poison  bool                                       // tests: overwrite each buffer put back
}

// get returns an empty buffer of capacity at least n ≤ maxBodyHint.
func (p *bodyPool) get(n int) *[]byte {
	k := 0
	if n > 1<<minBodyShift {
		k = bits.Len(uint(n-1)) - minBodyShift
	}
	if b, ok := p.classes[k].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 1<<(minBodyShift+k))
	return &b
}

// put recycles *b. A buffer whose capacity is no class (one append grew)
// is left to the collector.
func (p *bodyPool) put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minBodyShift || c > maxBodyHint || c&(c-1) != 0 {
		return
	}
	if p.poison {
		full := (*b)[:c]
		for i := range full {
			full[i] = poisonByte
		}
	}
	*b = (*b)[:0]
	p.classes[bits.Len(uint(c))-1-minBodyShift].Put(b)
}

// poisonByte fills recycled buffers under test: not valid UTF-8 nor JSON,
// so a body read after release cannot pass for a request.
const poisonByte = 0xfe

// bodyHint is how many bytes to reserve for a body whose content-length
// header says v: never more than limit or maxBodyHint, 0 when v is no
// length. The header is only a hint; the bytes that arrive decide.
func bodyHint(v string, limit int) int {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return int(min(n, int64(limit), maxBodyHint))
}
