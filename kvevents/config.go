package kvevents

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Config configures a Manager and its subscribers.
type Config struct {
	// Topic is the ZMQ topic prefix subscribed to (vLLM's kv-events "topic");
	// default "" (everything).
	Topic string
	// EventPort is the pods' PUB port when a Pod does not say; DP rank k
	// publishes on EventPort + k. Default 5557.
	EventPort int
	// ReplayPort is the pods' replay ROUTER port when a Pod does not say; DP
	// rank k serves replay on ReplayPort + k. Default 5558.
	ReplayPort int
	// Sources says which pods are asked where they publish, GET
	// /kv_event_sources on their API server (sources.go): SourcesAuto (the
	// default) those whose event and replay ports nothing configured,
	// SourcesAlways every pod, SourcesOff none. A pod that serves no such
	// route, or does not answer, is followed on its configured or default
	// ports.
	Sources string
	// DefaultEngine is the engine of pods that name none (pod.Pod.Engine):
	// "" or "vllm", "sglang", "trtllm". The blocks of SGLang and
	// TensorRT-LLM pods are indexed under kvrouter's hashes of their token
	// ids (their own ids are not vLLM's), which needs rekeying on.
	DefaultEngine string
	// QueueSize bounds the batches waiting between a pod's sockets and the
	// index. A full queue drops the newest live batch (counted) and the gap is
	// then filled by replay. Default 4096.
	QueueSize int
	// MaxMessageSize is the largest payload accepted, in bytes; larger
	// batches are dropped and counted. Default 16 MiB.
	MaxMessageSize int
	// ReplayTimeout bounds one replay request, from sending it to the end
	// marker. Default 5s.
	ReplayTimeout time.Duration
	// BackoffMin and BackoffMax bound the jittered exponential delay between
	// connection attempts to one pod. Defaults 1s and 30s.
	BackoffMin, BackoffMax time.Duration
	// PollInterval is how often an otherwise idle connection checks for
	// shutdown. Default 500ms.
	PollInterval time.Duration
	// BatchWindow is how long a busy connection (one read found 64 batches
	// or more waiting) lets batches accumulate before it reads again: the
	// socket is then read, and the index written, in runs of many batches
	// instead of one wake-up per batch. It delays the index by at most that
	// much. Default 1ms; 0 never waits.
	BatchWindow time.Duration
	// HeartbeatInterval is the ZMTP heartbeat period that detects a silent
	// peer; the connection drops after three missed heartbeats. Default 5s; 0
	// disables heartbeats.
	HeartbeatInterval time.Duration
	// Hash is the hash configuration the pods are expected to use, for
	// verifying their events. A zero Algorithm disables verification.
	Hash blockhash.Config
	// VerifyWindow is the number of recent chain checks a pod's verification
	// state is judged over: "mismatch" needs at least VerifyMinFailures
	// failures and no success in the window. Defaults 64 and 8.
	VerifyWindow, VerifyMinFailures int
	// VerifySample checks one in VerifySample eligible events once a pod is
	// verified (every event until then). Default 64.
	VerifySample int
	// RekeyBlocks bounds, per pod, the map from a pod's block hashes to
	// kvrouter's that rekeying keeps (see the package documentation): the
	// blocks of the last RekeyBlocks stores and parent lookups. About 100
	// bytes per block, only for pods not verified. Default 65536; 0 turns
	// rekeying off (a mismatching pod is then routed by load alone).
	RekeyBlocks int
	// Clock is the time source for backoff delays; nil means the real clock.
	Clock Clock
}

// Clock is the part of time the subscribers use, so tests can inject a fake.
type Clock interface {
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// maxBatchWindow bounds Config.BatchWindow: a longer one would leave the
// index that stale.
const maxBatchWindow = 100 * time.Millisecond

// DefaultConfig returns the defaults documented on Config's fields, with
// blockhash.DefaultConfig for verification.
func DefaultConfig() Config {
	return Config{
		Sources:           SourcesAuto,
		EventPort:         5557,
		ReplayPort:        5558,
		QueueSize:         4096,
		MaxMessageSize:    16 << 20,
		ReplayTimeout:     5 * time.Second,
		BackoffMin:        time.Second,
		BackoffMax:        30 * time.Second,
		PollInterval:      500 * time.Millisecond,
		BatchWindow:       time.Millisecond,
		HeartbeatInterval: 5 * time.Second,
		Hash:              blockhash.DefaultConfig(),
		VerifyWindow:      64,
		VerifyMinFailures: 8,
		VerifySample:      64,
		RekeyBlocks:       1 << 16,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	port := func(name string, p int) {
		if p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s = %d, want in [1, 65535]", name, p))
		}
	}
	positive := func(name string, v int64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s = %d, want > 0", name, v))
		}
	}
	switch c.Sources {
	case SourcesAuto, SourcesAlways, SourcesOff:
	default:
		errs = append(errs, fmt.Errorf("event sources %q, want auto, always or off", c.Sources))
	}
	if _, err := pod.ParseEngine(c.DefaultEngine); err != nil {
		errs = append(errs, fmt.Errorf("default %w", err))
	}
	port("event port", c.EventPort)
	port("replay port", c.ReplayPort)
	positive("queue size", int64(c.QueueSize))
	positive("max message size", int64(c.MaxMessageSize))
	positive("replay timeout", int64(c.ReplayTimeout))
	positive("backoff min", int64(c.BackoffMin))
	positive("poll interval", int64(c.PollInterval))
	if c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("backoff max %v < backoff min %v", c.BackoffMax, c.BackoffMin))
	}
	if c.BatchWindow < 0 || c.BatchWindow > maxBatchWindow {
		errs = append(errs, fmt.Errorf("batch window = %v, want in [0, %v]", c.BatchWindow, maxBatchWindow))
	}
	if c.HeartbeatInterval < 0 {
		errs = append(errs, fmt.Errorf("heartbeat interval = %v, want >= 0", c.HeartbeatInterval))
	}
	if c.Hash.Algorithm != "" {
		if err := c.Hash.Validate(); err != nil {
			errs = append(errs, err)
		}
		positive("verify window", int64(c.VerifyWindow))
		positive("verify sample", int64(c.VerifySample))
		if c.RekeyBlocks < 0 {
			errs = append(errs, fmt.Errorf("rekey blocks = %d, want >= 0", c.RekeyBlocks))
		}
		if c.VerifyMinFailures <= 0 || c.VerifyMinFailures > c.VerifyWindow {
			errs = append(errs, fmt.Errorf("verify min failures = %d, want in [1, verify window]", c.VerifyMinFailures))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kvevents: invalid config: %w", err)
	}
	return nil
}

func (c Config) clock() Clock {
	if c.Clock == nil {
		return realClock{}
	}
	return c.Clock
}
