package router

import (
	"math"
	"strings"
	"testing"
)

// TestValidateRefusesInfinity: every cost and weight must be finite. An
// infinite cost per token (a prefill speed of 1e-320 tokens/s inverted)
// would price every pod at infinity; an infinite weight or tolerance
// turns every comparison into NaN.
func TestValidateRefusesInfinity(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"prefill seconds per token":   func(c *Config) { c.PrefillSecondsPerToken = math.Inf(1) },
		"running seconds per request": func(c *Config) { c.RunningSecondsPerRequest = math.Inf(1) },
		"tolerance":                   func(c *Config) { c.Tolerance = math.Inf(1) },
	} {
		cfg := DefaultConfig()
		set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), name+" = +Inf, want finite and >= 0") {
			t.Errorf("%s = +Inf: Validate = %v, want an error naming it", name, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
}
