package kvevents

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999} {
		b := backoff{min: time.Second, max: 30 * time.Second, rand: func() float64 { return r }}
		ceil := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
		for i, c := range ceil {
			c *= time.Second
			got := b.next()
			if got < c/2 || got > c {
				t.Errorf("rand %v: attempt %d: next() = %v, want in [%v, %v]", r, i, got, c/2, c)
			}
		}
		b.reset()
		if got := b.next(); got > time.Second {
			t.Errorf("after reset: next() = %v, want <= 1s", got)
		}
	}
}
