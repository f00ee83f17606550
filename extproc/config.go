package extproc

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"
)

// BodyMode is how Envoy sends request bodies (its processing_mode).
type BodyMode string

// The request body modes kvrouter routes with. Envoy's configuration must
// use the same one; Envoy 1.34+ also says which in each stream's first
// message, and that wins.
const (
	// FullDuplexStreamed: Envoy streams body chunks as they arrive; kvrouter
	// holds its header response until the body is complete, then re-sends
	// the body. What the Gateway API Inference Extension uses.
	FullDuplexStreamed BodyMode = "FULL_DUPLEX_STREAMED"
	// Buffered: Envoy buffers the whole body (up to its buffer limit) and
	// sends it in one message; kvrouter answers with the destination.
	Buffered BodyMode = "BUFFERED"
)

// Validate reports m's problem if it is not a mode kvrouter routes with.
func (m BodyMode) Validate() error {
	if m != FullDuplexStreamed && m != Buffered {
		return fmt.Errorf("%q, want %s or %s", m, FullDuplexStreamed, Buffered)
	}
	return nil
}

// Config configures a Server. BodyMode, MaxBodyBytes and MaxStreams are
// the extproc section of kvrouter's config file; the rest are the
// package's own.
type Config struct {
	// BodyMode is the request body mode Envoy is configured with.
	// Default FULL_DUPLEX_STREAMED.
	BodyMode BodyMode `yaml:"body_mode"`
	// MaxBodyBytes is the largest request body accepted; larger ones are
	// refused with 413 while they arrive. Default 16 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// ChunkBytes is the largest body piece re-sent to Envoy in one message.
	// Default 62,000 (Envoy recommends staying under 64 KiB).
	ChunkBytes int `yaml:"-"`
	// MaxRecvMsgBytes is the largest gRPC message accepted from Envoy; a
	// BUFFERED body arrives as one message. Default MaxBodyBytes + 1 MiB.
	MaxRecvMsgBytes int `yaml:"-"`
	// DrainTimeout bounds how long open streams may take to finish when the
	// server stops. Default 10s.
	DrainTimeout time.Duration `yaml:"-"`
	// MaxStreams bounds the ext_proc streams open at once (one per HTTP
	// request in flight through Envoy); one more is refused with gRPC
	// RESOURCE_EXHAUSTED, so a flood cannot starve the streams already
	// routed. Default 4096.
	MaxStreams int `yaml:"max_streams"`
	// ResponseIDs asks Envoy for the body of OpenAI Responses API replies
	// when its filter sends response bodies to no one (response_body_mode
	// NONE, allow_mode_override true), to learn the response ids kvrouter
	// sends requests continuing a response to. Every piece of those replies
	// then makes a round trip through kvrouter. Replies whose body Envoy
	// already streams through kvrouter (its shipped configuration) are
	// read without it. Default false.
	ResponseIDs bool `yaml:"response_ids"`
	// TLS, when set, is what the server serves TLS with (its certificate,
	// and client certificates it verifies); nil: plaintext.
	TLS *tls.Config `yaml:"-"`
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		BodyMode:     FullDuplexStreamed,
		MaxBodyBytes: 16 << 20,
		ChunkBytes:   62_000,
		MaxStreams:   4096,
		DrainTimeout: 10 * time.Second,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.BodyMode.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("body_mode: %w", err))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("max_body_bytes: %d, want > 0", c.MaxBodyBytes))
	}
	if c.ChunkBytes <= 0 || c.ChunkBytes > 4<<20 {
		errs = append(errs, fmt.Errorf("chunk bytes = %d, want in (0, 4 MiB]", c.ChunkBytes))
	}
	if c.MaxRecvMsgBytes < 0 {
		errs = append(errs, fmt.Errorf("max receive message bytes = %d, want >= 0", c.MaxRecvMsgBytes))
	}
	if c.MaxStreams <= 0 {
		errs = append(errs, fmt.Errorf("max_streams: %d, want > 0", c.MaxStreams))
	}
	if c.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("drain timeout = %v, want >= 0", c.DrainTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("extproc: invalid config: %w", err)
	}
	return nil
}

func (c Config) maxRecvMsgBytes() int {
	if c.MaxRecvMsgBytes > 0 {
		return c.MaxRecvMsgBytes
	}
	return c.MaxBodyBytes + 1<<20
}
