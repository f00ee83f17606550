package fleetsim

import (
	"errors"
	"fmt"
	"math"
	"time"

	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/router"
)

// Config configures a simulated fleet. The cost defaults model
// Llama-3.1-8B on one H100-80GB under vLLM.
type Config struct {
	// Pods is the number of pods. Default 8.
	Pods int
	// Blocks is each pod's GPU KV cache in blocks. Default 28,000.
	Blocks int
	// BlockSize is the tokens per block. Default 16.
	BlockSize int
	// StepTokens is the token budget of one scheduler step, shared by
	// decodes and prefill chunks. Default 8,192.
	StepTokens int
	// MaxRunning is vLLM's max_num_seqs. Default 256.
	MaxRunning int
	// PrefillTokensPerSecond is the prefill throughput at short context.
	// Default 25,000.
	PrefillTokensPerSecond float64
	// AttentionPerToken is the prefill surcharge per token of context: a
	// token prefilled at context c costs (1 + c × AttentionPerToken) times
	// the base. Default 1.83e-5 (+15% at 8k, +60% at 32k).
	AttentionPerToken float64
	// StepOverhead is the fixed cost of every step. Default 5.5 ms.
	StepOverhead time.Duration
	// DecodePerSequence is the cost per decoding sequence in a step.
	// Default 6 µs.
	DecodePerSequence time.Duration
	// KVBytesPerToken and MemoryBandwidth give a step's KV read time:
	// Σ decode context × KVBytesPerToken / MemoryBandwidth. Defaults
	// 128 KiB (Llama-3.1-8B: 32 layers × 8 KV heads × 128 head dim × 2,
	// K and V, × 2 bytes of bf16) and 2.3 TB/s.
	KVBytesPerToken float64
	MemoryBandwidth float64
	// Speeds gives each pod a speed relative to the others: a pod of speed
	// s takes 1/s times as long for every step, prefill and decode (a GPU,
	// or a model, s times as fast). Empty: every pod 1. The kvrouter
	// policies' configured prefill speed stays PrefillTokensPerSecond.
	Speeds []float64
	// Roles gives each pod its part in prefill/decode disaggregation, by
	// pod (pd.go): prefill pods compute prompts for decode pods, which
	// receive their KV over the link below. Empty: every pod serves whole
	// requests, as do pods of kvpod.RoleBoth.
	Roles []kvpod.Role
	// KVLinkBandwidth is the bytes per second one GPU's KV moves from a
	// prefill pod to a decode pod: a transfer of n tokens takes
	// KVLinkLatency + n × KVBytesPerToken / KVLinkBandwidth (KVBytesPerToken
	// being one GPU's share, each GPU of a pod sending its own share over
	// its own link). Default 50 GB/s: one 400 Gb/s RDMA NIC per GPU
	// (ConnectX-7 in a DGX H100), which vLLM's NIXL connector reads over.
	KVLinkBandwidth float64
	// KVLinkLatency is the fixed cost of one transfer: the decode pod's
	// request after the prefill pod's answer and the transfer's
	// completion notice. Default 2 ms, an estimate.
	KVLinkLatency time.Duration
	// PDThreshold is the kvrouter policy's router.Config.PDThresholdTokens:
	// with prefill pods in Roles, a prefill pod computes a prompt only
	// when its destination lacks at least this many of its tokens.
	// Default the router's, 512.
	PDThreshold int
	// Precise configures the llm-d-precise policy; zero: DefaultPrecise.
	Precise Precise
	// Approximate configures the approximate policy; zero:
	// DefaultApproximate.
	Approximate Approximate
	// EventDelay is how long a step's KV events take to reach the router.
	// Default 50 ms.
	EventDelay time.Duration
	// ScrapeInterval is how often pods' queue and KV use are scraped for
	// policies that read metrics. Default 100 ms (the router's scraper's).
	ScrapeInterval time.Duration
	// Client is the load generator sending the workload. Default: open
	// loop, every request sent at its arrival time.
	Client Client
	// Seed seeds every random choice of the run.
	Seed uint64
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Pods:                   8,
		Blocks:                 28_000,
		BlockSize:              16,
		StepTokens:             8192,
		MaxRunning:             256,
		PrefillTokensPerSecond: 25_000,
		AttentionPerToken:      1.83e-5,
		StepOverhead:           5500 * time.Microsecond,
		DecodePerSequence:      6 * time.Microsecond,
		KVBytesPerToken:        128 << 10,
		MemoryBandwidth:        2.3e12,
		KVLinkBandwidth:        50e9,
		KVLinkLatency:          2 * time.Millisecond,
		PDThreshold:            router.DefaultConfig().PDThresholdTokens,
		EventDelay:             50 * time.Millisecond,
		ScrapeInterval:         100 * time.Millisecond,
		Seed:                   1,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, v float64) {
		if !(v > 0) {
			errs = append(errs, fmt.Errorf("%s = %v, want > 0", name, v))
		}
	}
	positive("pods", float64(c.Pods))
	positive("blocks", float64(c.Blocks))
	positive("block size", float64(c.BlockSize))
	positive("step tokens", float64(c.StepTokens))
	positive("max running", float64(c.MaxRunning))
	positive("prefill tokens per second", c.PrefillTokensPerSecond)
	positive("memory bandwidth", c.MemoryBandwidth)
	positive("scrape interval", float64(c.ScrapeInterval))
	if c.AttentionPerToken < 0 || c.StepOverhead < 0 || c.DecodePerSequence < 0 || c.KVBytesPerToken < 0 || c.EventDelay < 0 {
		errs = append(errs, errors.New("attention, step overhead, decode cost, KV bytes and event delay must be >= 0"))
	}
	if c.KVLinkLatency < 0 || c.PDThreshold < 0 {
		errs = append(errs, errors.New("KV link latency and P/D threshold must be >= 0"))
	}
	if len(c.Speeds) != 0 && len(c.Speeds) != c.Pods {
		errs = append(errs, fmt.Errorf("%d speeds for %d pods, want one per pod or none", len(c.Speeds), c.Pods))
	}
	for i, v := range c.Speeds {
		if !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("pod %d: speed %v, want > 0", i, v))
		}
	}
	if err := c.validateRoles(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Client.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fleetsim: invalid config: %w", err)
	}
	return nil
}

// speed is pod i's speed (Speeds).
func (c *Config) speed(i int) float64 {
	if len(c.Speeds) == 0 {
		return 1
	}
	return c.Speeds[i]
}

// prefillSeconds is the cost of prefilling tokens [from, from+n) of a
// sequence: the attention surcharge is taken at the chunk's mid context.
func (c *Config) prefillSeconds(from, n int) float64 {
	mid := float64(from) + float64(n)/2
	return float64(n) / c.PrefillTokensPerSecond * (1 + mid*c.AttentionPerToken)
}

// decodeSeconds is the decode part of a step with seqs decoding sequences
// whose contexts sum to ctx tokens.
func (c *Config) decodeSeconds(seqs, ctx int) float64 {
	if seqs == 0 {
		return 0
	}
	return float64(seqs)*c.DecodePerSequence.Seconds() + float64(ctx)*c.KVBytesPerToken/c.MemoryBandwidth
}

// validateRoles checks Roles and, when some pod prefills, the link.
func (c Config) validateRoles() error {
	if len(c.Roles) == 0 {
		return nil
	}
	var errs []error
	if len(c.Roles) != c.Pods {
		errs = append(errs, fmt.Errorf("%d roles for %d pods, want one per pod or none", len(c.Roles), c.Pods))
	}
	prefill, dest := 0, 0
	for i, r := range c.Roles {
		switch r {
		case kvpod.RolePrefill:
			prefill++
		case kvpod.RoleDecode, kvpod.RoleBoth:
			dest++
		default:
			errs = append(errs, fmt.Errorf("pod %d: role %q, want prefill, decode or none", i, r))
		}
	}
	if prefill > 0 && dest == 0 {
		errs = append(errs, errors.New("prefill pods and no pod to decode"))
	}
	if prefill > 0 && !(c.KVLinkBandwidth > 0) {
		errs = append(errs, fmt.Errorf("KV link bandwidth = %v, want > 0 with prefill pods", c.KVLinkBandwidth))
	}
	return errors.Join(errs...)
}

// prefills reports whether some pod is a prefill pod.
func (c *Config) prefills() bool {
	for _, r := range c.Roles {
		if r == kvpod.RolePrefill {
			return true
		}
	}
	return false
}

// transferSeconds is the time the KV of n tokens takes from a prefill pod
// to a decode pod.
func (c *Config) transferSeconds(n int) float64 {
	return c.KVLinkLatency.Seconds() + float64(n)*c.KVBytesPerToken/c.KVLinkBandwidth
}
