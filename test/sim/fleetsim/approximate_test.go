package fleetsim

import "testing"

// TestApproximateLRU: the approximate policy remembers, per pod, the
// configured blocks scaled to the pods (the default, an all-zero
// Approximate) or as given (OverloadApproximate: the cache-overload runs'
// lruCapacityPerServer on pods of 2,500 blocks).
func TestApproximateLRU(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Approximate
		want int
	}{
		{"default", Approximate{}, 4_067}, // 31,250 × 2,500 / 19,208
		{"overload", OverloadApproximate(), 31_250},
	} {
		cfg := DefaultConfig()
		cfg.Blocks, cfg.Approximate = 2_500, tc.a
		newP, err := PolicyByName("approximate")
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		if _, err := Run(cfg, burst(1, 1), func(s *Sim) (Policy, error) {
			p, err := newP(s)
			if a, ok := p.(*approximate); ok {
				got = cap(a.lru[0].keys)
			}
			return p, err
		}); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: an LRU of %d blocks per pod, want %d", tc.name, got, tc.want)
		}
	}
}
