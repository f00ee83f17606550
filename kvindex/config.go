package kvindex

import (
	"errors"
	"fmt"
	"time"
)

// Config configures an Index. MaxEntries is the index section of
// kvrouter's config file (max_entries); the rest are the package's own.
type Config struct {
	// Shards is the number of independently locked parts of the index; a
	// power of two. More shards mean less lock contention between event
	// appliers and matches. Default 64.
	Shards int `yaml:"-"`
	// MaxEntries bounds the number of (block, pod, tier) entries, speculative
	// ones included. When it is reached the least recently stored entries are
	// evicted first (counted in kvrouter_kvindex_evicted_total). Default 10M,
	// about 450 MB of heap.
	MaxEntries int `yaml:"max_entries"`
	// SpeculativeTTL is the longest an entry recorded by a routing decision
	// (Index.Speculate) counts in matches while its request waits for
	// prefill and before the pod's own KV event confirms it: a cap for
	// requests whose end is never reported. Default 60s.
	SpeculativeTTL time.Duration `yaml:"-"`
	// SpeculativeGrace is how long a speculative entry still counts once its
	// request has been prefilled or has ended (Index.Settle): time for the
	// pod's own BlockStored event to confirm it. At most SpeculativeTTL.
	// Default 2s.
	SpeculativeGrace time.Duration `yaml:"-"`
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time `yaml:"-"`
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Shards:           64,
		MaxEntries:       10_000_000,
		SpeculativeTTL:   60 * time.Second,
		SpeculativeGrace: 2 * time.Second,
	}
}

// maxSpeculativeTTL keeps deadlines comparable in 32-bit millisecond time.
const maxSpeculativeTTL = 24 * time.Hour

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Shards <= 0 || c.Shards&(c.Shards-1) != 0 || c.Shards > 1<<16 {
		errs = append(errs, fmt.Errorf("shards = %d, want a power of two in [1, 65536]", c.Shards))
	}
	if c.MaxEntries <= 0 || c.MaxEntries > 1<<31 {
		errs = append(errs, fmt.Errorf("max_entries: %d, want in [%d, 2^31]", c.MaxEntries, max(c.Shards, 1)))
	} else if c.Shards > 0 && c.MaxEntries < c.Shards {
		errs = append(errs, fmt.Errorf("max_entries: %d, want in [%d, 2^31]", c.MaxEntries, c.Shards))
	}
	if c.SpeculativeTTL < 0 || c.SpeculativeTTL > maxSpeculativeTTL {
		errs = append(errs, fmt.Errorf("speculative TTL = %v, want in [0, %v]", c.SpeculativeTTL, maxSpeculativeTTL))
	}
	if c.SpeculativeGrace < 0 || c.SpeculativeGrace > max(c.SpeculativeTTL, 0) {
		errs = append(errs, fmt.Errorf("speculative grace = %v, want in [0, speculative TTL %v]", c.SpeculativeGrace, c.SpeculativeTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kvindex: invalid config: %w", err)
	}
	return nil
}
