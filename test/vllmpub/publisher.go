// Package vllmpub imitates vLLM's ZMQ KV-event publisher for tests and
// demos: a PUB socket bound on the event endpoint (tcp://*:5557 + DP rank)
// sending [topic, seq (8 bytes big-endian), msgpack payload] with seq from 0
// per publisher, and a ROUTER bound on the replay endpoint (:5558 + rank)
// that answers [b"", start_seq] with every buffered batch from start_seq on
// and an end marker of seq -1, from a ring of the last BufferSteps batches.
// It is written from specs/VLLM.md, independently of package kvevents.
package vllmpub

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// Config configures a Publisher.
type Config struct {
	// Endpoint is the PUB socket's bind address; "tcp://127.0.0.1:*" picks a
	// free port. Default "tcp://*:5557".
	Endpoint string
	// ReplayEndpoint is the ROUTER's bind address; "" disables replay.
	ReplayEndpoint string
	// Topic is the first frame of every message. Default "".
	Topic string
	// BufferSteps is the number of batches kept for replay. Default 10000.
	BufferSteps int
	// TopicInReplay sends replies as [b"", topic, seq, payload] (newer vLLM)
	// instead of [b"", seq, payload].
	TopicInReplay bool
	// HWM is the PUB send high-water mark. Default 100000.
	HWM int
	// PollInterval is how often Run reads replay requests. Default 1ms;
	// processes holding many publishers raise it so idle ones do not wake
	// a thousand times a second.
	PollInterval time.Duration
	// DropReply, when set, is asked before each replayed batch is sent;
	// true drops it, as a ROUTER drops what its full pipe cannot take.
	DropReply func(seq uint64) bool
}

// DefaultConfig returns vLLM's defaults with replay on :5558.
func DefaultConfig() Config {
	return Config{Endpoint: "tcp://*:5557", ReplayEndpoint: "tcp://*:5558", BufferSteps: 10000, HWM: 100000, PollInterval: time.Millisecond}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Endpoint == "" {
		errs = append(errs, errors.New("vllmpub: empty endpoint"))
	}
	if c.BufferSteps <= 0 {
		errs = append(errs, fmt.Errorf("vllmpub: buffer steps %d, want > 0", c.BufferSteps))
	}
	if c.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("vllmpub: poll interval %s, want >= 0", c.PollInterval))
	}
	if c.HWM < 0 {
		errs = append(errs, fmt.Errorf("vllmpub: HWM %d, want >= 0", c.HWM))
	}
	return errors.Join(errs...)
}

type request struct {
	payload []byte
	silent  bool // buffer for replay without sending (a batch lost on the wire)
}

// Publisher is one publishing process (one DP rank). Publish may be called
// from any goroutine; Run owns the sockets.
type Publisher struct {
	cfg            Config
	pub, router    *zmq.Socket
	endpoint       string
	replayEndpoint string
	in             chan request
	seq            uint64
	ring           []entry
}

type entry struct {
	seq     uint64
	payload []byte
}

// New binds the sockets; it starts nothing. Run serves them and closes them
// on return; a Publisher that is never run must be closed with Close.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, in: make(chan request, 1024)}
	var err error
	if p.pub, err = zmq.NewSocket(zmq.PUB); err != nil {
		return nil, fmt.Errorf("vllmpub: new PUB socket: %w", err)
	}
	err = errors.Join(p.pub.SetLinger(0), p.pub.SetSndhwm(cfg.HWM), p.pub.Bind(cfg.Endpoint))
	if err == nil {
		p.endpoint, err = p.pub.GetLastEndpoint()
	}
	if err == nil && cfg.ReplayEndpoint != "" {
		p.router, err = zmq.NewSocket(zmq.ROUTER)
		if err == nil {
			err = errors.Join(p.router.SetLinger(0), p.router.Bind(cfg.ReplayEndpoint))
		}
		if err == nil {
			p.replayEndpoint, err = p.router.GetLastEndpoint()
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("vllmpub: bind: %w", err), p.Close())
	}
	return p, nil
}

// Endpoint and ReplayEndpoint return the bound addresses.
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint returns the ROUTER's bound address ("" without replay).
func (p *Publisher) ReplayEndpoint() string { return p.replayEndpoint }

// Close closes the sockets of a Publisher that was never run.
func (p *Publisher) Close() error {
	var errs []error
	for _, s := range []*zmq.Socket{p.pub, p.router} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	p.pub, p.router = nil, nil
	return errors.Join(errs...)
}

// Publish queues one payload for sending as the next batch.
func (p *Publisher) Publish(ctx context.Context, payload []byte) error {
	return p.enqueue(ctx, request{payload: payload})
}

// Lose takes the next sequence number for payload and buffers it for
// replay without sending it, as when PUB's high-water mark drops a message.
func (p *Publisher) Lose(ctx context.Context, payload []byte) error {
	return p.enqueue(ctx, request{payload: payload, silent: true})
}

func (p *Publisher) enqueue(ctx context.Context, r request) error {
	select {
	case p.in <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run sends queued batches and answers replay requests until ctx is done,
// then closes the sockets.
//
// It never blocks inside libzmq: a goroutine waiting in a cgo call keeps
// its P until the runtime's monitor takes it back (up to 10 ms when the
// process is otherwise idle), so a process holding many publishers that
// waited in zmq_poll would delay its own other goroutines, the load tools'
// gRPC clients among them. Batches are sent as soon as they are published;
// the ROUTER is read without waiting every PollInterval.
func (p *Publisher) Run(ctx context.Context) (err error) {
	defer func() { err = errors.Join(err, p.Close()) }()
	var replay <-chan time.Time
	if p.router != nil {
		t := time.NewTicker(cmp.Or(p.cfg.PollInterval, time.Millisecond))
		defer t.Stop()
		replay = t.C
	}
	for {
		select {
		case r := <-p.in:
			if err := p.send(r); err != nil {
				return err
			}
		case <-replay:
			if err := p.serveReplay(); err != nil {
				return err
			}
		case <-ctx.Done():
			for { // send what was queued before ctx ended
				select {
				case r := <-p.in:
					if err := p.send(r); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		}
	}
}

func (p *Publisher) send(r request) error {
	seq := p.seq
	p.seq++
	if len(p.ring) == p.cfg.BufferSteps {
		p.ring = p.ring[1:]
	}
	p.ring = append(p.ring, entry{seq: seq, payload: r.payload})
	if r.silent {
		return nil
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	if _, err := p.pub.SendMessage([]byte(p.cfg.Topic), s[:], r.payload); err != nil {
		return fmt.Errorf("vllmpub: send: %w", err)
	}
	return nil
}

// serveReplay answers every pending replay request.
func (p *Publisher) serveReplay() error {
	for {
		msg, err := p.router.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return nil
		}
		if len(msg) != 3 || len(msg[2]) != 8 {
			continue // not [identity, b"", start_seq]
		}
		id, start := msg[0], binary.BigEndian.Uint64(msg[2])
		for _, e := range p.ring {
			if e.seq < start || (p.cfg.DropReply != nil && p.cfg.DropReply(e.seq)) {
				continue
			}
			if err := p.reply(id, e.seq, e.payload); err != nil {
				return err
			}
		}
		if err := p.reply(id, math.MaxUint64, nil); err != nil {
			return err
		}
	}
}

func (p *Publisher) reply(id []byte, seq uint64, payload []byte) error {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	var err error
	if p.cfg.TopicInReplay {
		_, err = p.router.SendMessage(id, []byte{}, []byte(p.cfg.Topic), s[:], payload)
	} else {
		_, err = p.router.SendMessage(id, []byte{}, s[:], payload)
	}
	if err != nil {
		return fmt.Errorf("vllmpub: replay reply: %w", err)
	}
	return nil
}
