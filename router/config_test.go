package router

import (
	"math"
	"strings"
	"testing"
)

// TestValidateRefusesInfinity: every cost and weight must be finite and
// in range, and each problem names its setting's key. An infinite speed
// would price every cached prefix at nothing; an infinite weight or
// tolerance turns every comparison into NaN.
func TestValidateRefusesInfinity(t *testing.T) {
	for want, set := range map[string]func(*Config){
		"prefill_tokens_per_second: +Inf, want a finite number > 0": func(c *Config) { c.PrefillTokensPerSecond = math.Inf(1) },
		"prefill_tokens_per_second: 0, want a finite number > 0":    func(c *Config) { c.PrefillTokensPerSecond = 0 },
		"tuning: running seconds per request = +Inf, want finite":   func(c *Config) { c.Tuning.RunningSecondsPerRequest = math.Inf(1) },
		"tolerance: +Inf, want from 0 to 1":                         func(c *Config) { c.Tolerance = math.Inf(1) },
		"tolerance: NaN, want from 0 to 1":                          func(c *Config) { c.Tolerance = math.NaN() },
		"queue_max_wait: 0s, want > 0 while the queue is on":        func(c *Config) { c.QueueMaxWait = 0 },
		`prefill_header: "X-Up", want a lower-case header name`:     func(c *Config) { c.PrefillHeader = "X-Up" },
	} {
		cfg := DefaultConfig()
		set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want an error containing %q", err, want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
}
