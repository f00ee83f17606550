package kvevents

import (
	"math/rand/v2"
	"time"
)

// backoff computes jittered exponential delays between connection attempts:
// the ceiling doubles from min to max, and each delay is drawn uniformly
// from the upper half of the current ceiling, so pods that fail together do
// not retry together.
type backoff struct {
	min, max time.Duration
	ceil     time.Duration
	rand     func() float64 // in [0, 1); nil means math/rand/v2
}

// next returns the delay before the next attempt.
func (b *backoff) next() time.Duration {
	switch {
	case b.ceil == 0:
		b.ceil = b.min
	case b.ceil < b.max:
		b.ceil = min(2*b.ceil, b.max)
	}
	r := rand.Float64
	if b.rand != nil {
		r = b.rand
	}
	half := b.ceil / 2
	return half + time.Duration(r()*float64(b.ceil-half))
}

// reset starts over from min after a successful connection.
func (b *backoff) reset() { b.ceil = 0 }
