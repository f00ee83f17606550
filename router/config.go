package router

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/router/render"
)

// Config is the routing policy's settings: the routing section of
// kvrouter's config file, key for key (docs/routing.md explains each).
// What the policy weighs beyond them is in Tuning.
type Config struct {
	// PrefillTokensPerSecond is one pod's prefill speed at no context: what
	// an uncached prompt token costs it. With LearnPrefillSpeeds it is the
	// prior each pod's learned speed starts from. Default 10000.
	PrefillTokensPerSecond float64 `yaml:"prefill_tokens_per_second"`
	// LearnPrefillSpeeds prices each pod at the prefill speed learned from
	// its vLLM metrics (fleet.SpeedEstimator), so that a fleet mixing GPUs
	// or models is priced right; false prices every pod at
	// PrefillTokensPerSecond. Default true.
	LearnPrefillSpeeds bool `yaml:"learn_prefill_speeds"`
	// Tolerance: pods whose predicted cost is within this fraction of the
	// best are equal and one is picked at random, so that a shared prefix
	// does not send all its traffic to one pod. In [0, 1]. Default 0.05.
	Tolerance float64 `yaml:"tolerance"`
	// Homes gives each prefix a home pod that its requests go to unless
	// another pod is clearly cheaper, and keeps each pod's homes within its
	// KV cache (homes.go). Default true.
	Homes bool `yaml:"homes"`
	// QueuePrefillsPerPod turns on kvrouter's queue (queue.go): once the
	// prompts queued for a model's pods pass what their KV caches hold, a
	// pod with this many of the replica's requests awaiting their first
	// token takes no more, and requests wait in kvrouter for a pod with
	// room. 0 turns the queue off. Default 2.
	QueuePrefillsPerPod int `yaml:"queue_prefills_per_pod"`
	// QueueMaxWait bounds a request's wait in the queue: it is then routed
	// as if nothing were queued. In BUFFERED body mode the proxy's ext_proc
	// message_timeout must exceed it. Default 30s.
	QueueMaxWait time.Duration `yaml:"queue_max_wait"`
	// ScaleFromZeroWait, when above 0, has a request for a model with no
	// ready pod wait up to this long for one (a pool scaling up from
	// zero) instead of being refused at once (capacity.go). The model must
	// be one a pod ever served or one with a configured tokenizer. 0: off,
	// the default; 60s suits a pool that scales from zero.
	ScaleFromZeroWait time.Duration `yaml:"scale_from_zero_wait"`
	// SaturationWaiting and SaturationKV say when a pod is saturated: this
	// many requests waiting in its queue, or its KV cache this full (0 to
	// 1). When every candidate is, a request whose objective's priority is
	// below zero is shed with 429. Defaults 5 and 0.8, the reference
	// Endpoint Picker's.
	SaturationWaiting int     `yaml:"saturation_waiting"`
	SaturationKV      float64 `yaml:"saturation_kv"`
	// StaleMetricsAfter is how long a pod's metrics scrapes may fail
	// before its figures are too old to route by: such a pod, like one
	// never scraped, is blind and left out while a pod with fresh figures
	// can serve. 0 never counts figures stale. Default 10s.
	StaleMetricsAfter time.Duration `yaml:"stale_metrics_after"`
	// DestinationEndpoints is how many endpoints a decision names: the
	// pick, then the next best by cost as fallbacks the proxy tries in
	// order (needs Envoy's override_host load balancing). 1 to 16.
	// Default 1.
	DestinationEndpoints int `yaml:"destination_endpoints"`
	// PDThresholdTokens: with prefill and decode pods, a prefill pod
	// computes the prompt first only when the chosen decode pod lacks at
	// least this many of its tokens. Default 512.
	PDThresholdTokens int `yaml:"pd_threshold_tokens"`
	// PrefillHeader is the request header naming the chosen prefill pod
	// (ip:port) for the decode pod's sidecar. Default
	// x-prefiller-host-port, llm-d's routing sidecar's.
	PrefillHeader string `yaml:"prefill_header"`

	// MaxTokenizeBytes bounds the work one request may cost: a larger body
	// is routed by load without tokenizing (ReasonTooLong). kvrouter's
	// config file sets it as tokenizers.max_tokenize_bytes. Default 4 MiB;
	// 0: no bound but the body's own.
	MaxTokenizeBytes int `yaml:"-"`
	// ResponseIDs bounds the OpenAI Responses API response ids remembered
	// with the pod that produced each (responseids.go), the oldest
	// forgotten first; 0 sends requests naming a response by prefix or
	// load like any other. Default 100000 (about 10 MB).
	ResponseIDs int `yaml:"response_ids"`
	// Models are the models' tokenization modes (modes.go), set from the
	// tokenizers section; a model not here is auto with no render
	// endpoint configured.
	Models map[string]ModelMode `yaml:"-"`
	// Render bounds the calls to render endpoints. Default
	// render.DefaultConfig().
	Render render.Config `yaml:"-"`
	// Tuning is the policy's tuned numbers; DefaultTuning unless a
	// simulation varies them.
	Tuning Tuning `yaml:"-"`
	// IntN breaks ties among near-best pods: a uniform int in [0, n),
	// called from concurrent decisions. Nil means math/rand/v2.IntN; the
	// fleet simulator injects a seeded one so that its runs repeat.
	IntN func(n int) int `yaml:"-"`
	// Now is the router's clock. Nil means time.Now; the fleet simulator
	// injects its own.
	Now func() time.Time `yaml:"-"`
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		PrefillTokensPerSecond: 10_000,
		LearnPrefillSpeeds:     true,
		Tolerance:              0.05,
		Homes:                  true,
		QueuePrefillsPerPod:    2,
		QueueMaxWait:           30 * time.Second,
		SaturationWaiting:      5,
		SaturationKV:           0.8,
		StaleMetricsAfter:      fleet.DefaultStaleAfter,
		DestinationEndpoints:   1,
		PDThresholdTokens:      512,
		PrefillHeader:          "x-prefiller-host-port",
		MaxTokenizeBytes:       4 << 20,
		ResponseIDs:            100_000,
		Render:                 render.DefaultConfig(),
		Tuning:                 DefaultTuning(),
	}
}

// secondsPerToken is the configured prefill cost of one uncached token.
func (c Config) secondsPerToken() float64 { return 1 / c.PrefillTokensPerSecond }

// Validate reports every problem of c at once. Each problem of a setting
// begins with its key, as kvrouter's config file spells it.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, v any, want string) {
		errs = append(errs, fmt.Errorf("%s: %v, want %s", key, v, want))
	}
	if v := c.PrefillTokensPerSecond; !(v > 0) || math.IsInf(v, 1) {
		bad("prefill_tokens_per_second", v, "a finite number > 0")
	}
	if v := c.Tolerance; !(v >= 0 && v <= 1) {
		bad("tolerance", v, "from 0 to 1")
	}
	if c.QueuePrefillsPerPod < 0 {
		bad("queue_prefills_per_pod", c.QueuePrefillsPerPod, ">= 0 (0: no queue)")
	}
	if c.QueuePrefillsPerPod > 0 && c.QueueMaxWait <= 0 {
		bad("queue_max_wait", c.QueueMaxWait, "> 0 while the queue is on")
	}
	if c.ScaleFromZeroWait < 0 {
		bad("scale_from_zero_wait", c.ScaleFromZeroWait, ">= 0 (0: off)")
	}
	if c.SaturationWaiting < 0 {
		bad("saturation_waiting", c.SaturationWaiting, ">= 0")
	}
	if v := c.SaturationKV; !(v >= 0 && v <= 1) {
		bad("saturation_kv", v, "from 0 to 1")
	}
	if c.StaleMetricsAfter < 0 {
		bad("stale_metrics_after", c.StaleMetricsAfter, ">= 0 (0: never stale)")
	}
	if c.DestinationEndpoints < 1 || c.DestinationEndpoints > 16 {
		bad("destination_endpoints", c.DestinationEndpoints, "from 1 to 16")
	}
	if c.PDThresholdTokens < 0 {
		bad("pd_threshold_tokens", c.PDThresholdTokens, ">= 0")
	}
	if h := c.PrefillHeader; h == "" || strings.ToLower(h) != h || strings.ContainsAny(h, " :\t") {
		bad("prefill_header", fmt.Sprintf("%q", h), "a lower-case header name")
	}
	if c.ResponseIDs < 0 {
		bad("response_ids", c.ResponseIDs, ">= 0")
	}
	if c.MaxTokenizeBytes < 0 {
		bad("max_tokenize_bytes", c.MaxTokenizeBytes, ">= 0")
	}
	errs = append(errs, c.Tuning.validate())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("router: invalid config: %w", err)
	}
	return nil
}
