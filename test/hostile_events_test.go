package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/wire"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// rawPublisher is a hostile pod: a PUB socket that sends whatever frames a
// test gives it, and a replay ROUTER serving every sequenced batch sent.
type rawPublisher struct {
	pub             *zmq.Socket
	events, replays int
	mu              struct {
		sync.Mutex
		history [][]byte // payload by seq
	}
}

func newRawPublisher(t *testing.T) *rawPublisher {
	t.Helper()
	p := &rawPublisher{}
	bind := func(kind zmq.Type) (*zmq.Socket, int) {
		s, e := zmq.NewSocket(kind)
		if e == nil {
			e = errors.Join(s.SetLinger(0), s.SetSndhwm(0), s.Bind("tcp://127.0.0.1:*"))
		}
		if e != nil {
			t.Fatal(e)
		}
		ep, e := s.GetLastEndpoint()
		if e != nil {
			t.Fatal(e)
		}
		return s, port(t, ep)
	}
	p.pub, p.events = bind(zmq.PUB)
	router, replays := bind(zmq.ROUTER)
	p.replays = replays
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.serveReplay(ctx, router)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := errors.Join(router.Close(), p.pub.Close()); err != nil {
			t.Error(err)
		}
	})
	return p
}

// serveReplay answers [id, "", start] with every batch from start on and
// the end marker, until ctx is done. It owns router.
func (p *rawPublisher) serveReplay(ctx context.Context, router *zmq.Socket) {
	poller := zmq.NewPoller()
	poller.Add(router, zmq.POLLIN)
	for ctx.Err() == nil {
		if _, err := poller.Poll(10e6); err != nil {
			continue
		}
		msg, err := router.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil || len(msg) != 3 || len(msg[2]) != 8 {
			continue
		}
		p.mu.Lock()
		history := p.mu.history
		p.mu.Unlock()
		for seq := binary.BigEndian.Uint64(msg[2]); seq < uint64(len(history)); seq++ {
			_, _ = router.SendMessage(msg[0], []byte{}, seqFrame(seq), history[seq])
		}
		_, _ = router.SendMessage(msg[0], []byte{}, seqFrame(math.MaxUint64), []byte{})
	}
}

func seqFrame(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// batch sends payload as the next sequenced batch and returns its seq.
func (p *rawPublisher) batch(t *testing.T, payload []byte) uint64 {
	t.Helper()
	p.mu.Lock()
	seq := uint64(len(p.mu.history))
	p.mu.history = append(p.mu.history, payload)
	p.mu.Unlock()
	p.frames(t, []byte{}, seqFrame(seq), payload)
	return seq
}

// frames sends one message of arbitrary frames.
func (p *rawPublisher) frames(t *testing.T, frames ...[]byte) {
	t.Helper()
	if _, err := p.pub.SendMessage(frames); err != nil {
		t.Fatal(err)
	}
}

// hostilePayloads are batches no decoder may accept: claimed lengths far
// beyond the data, nesting 100k deep, wrong types where vLLM's schema has
// fixed ones.
func hostilePayloads(valid []byte) [][]byte {
	ts := []byte{0xcb, 0x41, 0xd9, 0, 0, 0, 0, 0, 0} // float64 ts
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	deep := func(open byte, n int) []byte {
		b := bytes.Repeat([]byte{open}, n)
		return append(b, 0x90)
	}
	return [][]byte{
		cat([]byte{0x92}, ts, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}),                                                        // events: 4G claimed, none sent
		cat([]byte{0x92}, ts, []byte{0x91, 0x94, 0xab}, []byte("BlockStored"), []byte{0xdd, 0x7f, 0xff, 0xff, 0xff, 1}),    // 2G hashes claimed
		cat([]byte{0x92}, ts, []byte{0x91, 0x93, 0xac}, []byte("BlockRemoved"), []byte{0xdc, 0xff, 0xff}),                  // truncated array16
		cat([]byte{0x92}, ts, deep(0x91, 100_000)),                                                                         // events nested 100k deep
		cat([]byte{0x92}, ts, []byte{0x91, 0x92, 0xab}, []byte("BlockStored"), deep(0x91, 100_000)),                        // hashes nested 100k deep
		cat([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}),                                                                          // a map of 4G pairs, none sent
		cat([]byte{0xa5}, []byte("hello")),                                                                                 // a string, not a batch
		cat([]byte{0x92, 0xa2}, []byte("ts"), []byte{0x90}),                                                                // ts a string
		cat([]byte{0x92}, ts, []byte{0x81, 0x01, 0x02}),                                                                    // events a map
		cat([]byte{0x92}, ts, []byte{0x91, 0x92, 0xab}, []byte("BlockStored"), []byte{0xa3}, []byte("abc")),                // hashes a string
		cat([]byte{0x92}, ts, []byte{0x91, 0x92, 0xab}, []byte("BlockStored"), []byte{0x91, 0xc3}),                         // a hash that is a bool
		cat([]byte{0x92}, ts, []byte{0x91, 0x92, 0xab}, []byte("BlockStored"), []byte{0x91, 0xcb, 1, 2, 3, 4, 5, 6, 7, 8}), // a hash that is a float
		{},        // empty
		{0xc1},    // the never-used byte
		valid[:1], // the outer array header alone
		valid[:len(valid)/2],
		valid[:len(valid)-1],
	}
}

// TestHostileEventPayloads floods one subscriber with malformed batches and
// frames, mixed with valid batches, from a raw PUB socket: every malformed
// one is dropped and counted exactly, oversize ones too, the index holds
// exactly the valid batches' blocks, and the subscriber still applies a
// batch sent after the flood.
func TestHostileEventPayloads(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 1, events: func(c *kvevents.Config) {
		fastEvents(c)
		c.MaxMessageSize = 1 << 20
	}})
	raw := newRawPublisher(t)
	if err := f.events.Ensure(kvpod.Pod{Name: "hostile", IP: "127.0.0.1", EventPort: raw.events, ReplayPort: raw.replays, Model: "qwen3"}); err != nil {
		t.Fatal(err)
	}
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	next := 0
	valid := func() []byte { // a fresh root chain of 4 blocks
		tokens := make([]uint32, 4*h.BlockSize())
		for i := range tokens {
			tokens[i] = uint32(next*len(tokens) + i)
		}
		next++
		hashes := h.AppendHashes(nil, tokens, blockhash.Extra{})
		want = append(want, hashes...)
		payload, err := vllmpub.Encode(vllmpub.Batch{TS: 1, Events: []vllmpub.Event{{Type: "BlockStored", BlockHashes: hashes, TokenIDs: tokens, BlockSize: h.BlockSize()}}}, vllmpub.Form{})
		if err != nil {
			t.Fatal(err)
		}
		return payload
	}
	awaitLive(t, f, raw, valid)

	decodeErrors := metric(t, f.reg, "decode_errors_total", "hostile")
	template := valid()
	want = want[:len(want)-4] // never sent whole
	bad := hostilePayloads(template)
	dec := wire.NewDecoder()
	for i, p := range bad {
		if _, err := dec.Decode(p); err == nil {
			t.Fatalf("hostile payload %d (% x…) decoded without error", i, p[:min(len(p), 16)])
		}
	}
	oversize := append(valid(), make([]byte, 1<<20)...) // a valid batch, then too long
	want = want[:len(want)-4]                           // its blocks are never stored
	const rounds = 200
	framing := [][][]byte{
		{[]byte("only-one")},
		{{}, seqFrame(1)},
		{{}, seqFrame(1), {0x90}, {0x90}},
		{{}, []byte{0, 0, 0, 0, 0, 0, 1}, {0x90}}, // a 7-byte seq
		{{}, []byte("not-a-seq-at-all"), {0x90}},
	}
	for range rounds {
		for _, p := range bad {
			raw.batch(t, p)
		}
		for _, fr := range framing {
			raw.frames(t, fr...)
		}
		raw.batch(t, valid())
	}
	for range 3 {
		raw.batch(t, oversize)
	}
	last := raw.batch(t, valid())
	f.awaitMetric(t, "last_seq", "hostile", float64(last), "rank", "0")

	wantErrors := decodeErrors + float64(rounds*(len(bad)+len(framing)))
	if got := metric(t, f.reg, "decode_errors_total", "hostile"); got != wantErrors {
		t.Errorf("decode_errors_total = %g, want %g (every malformed batch and frame once)", got, wantErrors)
	}
	if got := metric(t, f.reg, "oversize_total", "hostile"); got != 3 {
		t.Errorf("oversize_total = %g, want 3", got)
	}
	f.dropSpeculation()
	if held, entries := f.indexed("hostile", want); len(held) != len(want) || entries != len(want) {
		t.Fatalf("index of the hostile pod holds %d of the %d valid blocks and %d entries in all, want exactly the valid blocks", len(held), len(want), entries)
	}
	f.post(t, "sim-0", prompt("tides", "Still routing?"))
	f.awaitExact(t, "sim-0", f.sims["sim-0"].Cached)
	f.expectRouted(t, "tides", "sim-0")
}

// awaitLive sends valid batches until one arrives live rather than by
// replay, so the subscription has reached the publisher and frames that
// cannot be replayed are not lost to a slow join.
func awaitLive(t *testing.T, f *fleet, raw *rawPublisher, valid func() []byte) {
	t.Helper()
	f.awaitMetric(t, "connected", "hostile", 1, "rank", "0")
	for range 100 {
		replays := metric(t, f.reg, "replays_total", "hostile", "result", "ok")
		seq := raw.batch(t, valid())
		f.awaitMetric(t, "batches_total", "hostile", float64(seq+1))
		if metric(t, f.reg, "replays_total", "hostile", "result", "ok") == replays {
			return
		}
	}
	t.Fatal("no batch of the hostile pod arrived live")
}
