package kvevents

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
)

// The operations of FuzzSequence; an input byte b is op b%numSeqOps with
// argument b/numSeqOps.
const (
	opStore     = iota // a live BlockStored of a new hash (odd arg: and of a held one)
	opRemove           // a live BlockRemoved of a held hash
	opClear            // a live AllBlocksCleared
	opLoseStore        // a BlockStored lost on the wire (replay only)
	opLoseOther        // a BlockRemoved (even arg) or AllBlocksCleared lost on the wire
	opLoseDrop         // a lost BlockStored whose first replay reply is dropped too
	opRestart          // the publisher numbers from 0 again (Reset)
	opReconnect        // the publisher stops and a new one binds the same ports
	numSeqOps
)

var seqOpNames = [numSeqOps]string{"store", "remove", "clear", "lose-store", "lose-other", "lose-drop", "restart", "reconnect"}

// maxSeqOps bounds one input; maxReconnects bounds its slowest operation.
const maxSeqOps, maxReconnects = 40, 2

// seqBatch is one published batch: its effect on the pod's cache.
type seqBatch struct {
	seq    uint64
	kind   int // opStore, opRemove or opClear
	hashes []uint64
}

// multiset is a pod's blocks, hash to count.
type multiset map[uint64]int

func (m multiset) apply(b seqBatch) {
	switch b.kind {
	case opStore:
		for _, h := range b.hashes {
			m[h]++
		}
	case opRemove:
		for _, h := range b.hashes {
			if m[h]--; m[h] <= 0 {
				delete(m, h)
			}
		}
	case opClear:
		clear(m)
	}
}

// seqModel is what the pod's publisher holds and what the subscriber must
// have made of it: the publisher's sequence, replay ring and cache, and
// the index entries and counters the protocol implies.
type seqModel struct {
	buffer int
	// The publisher.
	seq   uint64
	ring  []seqBatch
	cache multiset
	// The subscriber: the next batch it takes, whether it took one since
	// its last clear, and the pod's expected index entries.
	next     uint64
	hasState bool
	index    multiset
	// Predicted counters.
	gaps, exhausted, exhaustedClears, restarts, retried, allCleared float64
	// Lost batches whose first replay reply the publisher drops.
	drops []uint64
	fresh uint64
}

func (m *seqModel) newHash() uint64 {
	m.fresh++
	return m.fresh
}

// held returns one of the publisher's cached hashes chosen by arg.
func (m *seqModel) held(arg int) (uint64, bool) {
	if len(m.cache) == 0 {
		return 0, false
	}
	hs := make([]uint64, 0, len(m.cache))
	for h := range m.cache {
		hs = append(hs, h)
	}
	slices.Sort(hs) // map order is random: an input must always mean the same
	return hs[arg%len(hs)], true
}

// publish numbers b and adds it to the ring and the cache.
func (m *seqModel) publish(b seqBatch) seqBatch {
	b.seq = m.seq
	m.seq++
	if len(m.ring) == m.buffer {
		m.ring = m.ring[1:]
	}
	m.ring = append(m.ring, b)
	m.cache.apply(b)
	return b
}

// take is the subscriber taking batch b.
func (m *seqModel) take(b seqBatch) {
	m.index.apply(b)
	if b.kind == opClear {
		m.allCleared++
	}
	m.next, m.hasState = b.seq+1, true
}

// live is the subscriber receiving live batch s (already published): it
// reports whether s revealed a gap, which the test must let settle before
// the ring moves on. drops are the lost batches whose first reply will be
// dropped: only those with their predecessor in the same replay, since a
// missing first reply reads as an exhausted buffer.
func (m *seqModel) live(s uint64) (gap bool, drops []uint64) {
	if m.next == s {
		m.take(m.ring[len(m.ring)-1])
		return false, nil
	}
	m.gaps++
	first := m.ring[0].seq
	if first > m.next {
		m.exhausted++
		if m.hasState {
			m.exhaustedClears++
		}
		clear(m.index)
	}
	for _, d := range m.drops {
		if d > m.next && d-1 >= first {
			drops = append(drops, d)
		}
	}
	if len(drops) > 0 {
		m.retried++ // the publisher drops them all in one reply; the retry gets all
	}
	m.drops = nil
	for _, b := range m.ring {
		if b.seq >= m.next {
			m.take(b)
		}
	}
	return true, drops
}

// newProcess is a new publishing process: seq from 0, nothing cached. The
// subscriber detects it (restart) when it had taken a batch.
func (m *seqModel) newProcess() {
	m.seq, m.ring, m.cache, m.drops = 0, nil, multiset{}, nil
	if m.next > 0 {
		m.restarts++
		m.next, m.hasState = 0, false
		clear(m.index)
	}
}

// seqHarness runs one FuzzSequence input against a real publisher and
// subscriber.
type seqHarness struct {
	t     *testing.T
	f     *fleet
	p     *pub
	m     *seqModel
	mu    sync.Mutex
	drop  map[uint64]bool // replies to drop once
	trace []string
	// model is the pod's KV-cache groups: modelPlain, modelMLA or
	// modelHybrid.
	model int
}

// The pods FuzzSequence plays, by the KV-cache groups their events name.
const (
	modelPlain  = iota // one group, events naming no group or kind
	modelMLA           // one mla_attention group (DeepSeek, Kimi)
	modelHybrid        // full_attention and sliding_window groups (gpt-oss, Gemma)
	numModels
)

func (h *seqHarness) dropReply(seq uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drop[seq] {
		delete(h.drop, seq)
		return true
	}
	return false
}

func (h *seqHarness) setDrops(seqs []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.drop)
	for _, s := range seqs {
		h.drop[s] = true
	}
}

// payload encodes b as the pod's model publishes it. A hybrid model stores
// each block in both groups and its sliding window frees the blocks at
// once: the index, which holds the full-attention group, must not lose
// them.
func (h *seqHarness) payload(b seqBatch) []byte {
	ev := vllmpub.Event{Type: "BlockStored", BlockHashes: b.hashes}
	switch b.kind {
	case opRemove:
		ev.Type = "BlockRemoved"
	case opClear:
		ev = vllmpub.Event{Type: "AllBlocksCleared"}
	}
	events := []vllmpub.Event{ev}
	full, window := 0, 1
	switch {
	case b.kind == opClear || h.model == modelPlain:
	case h.model == modelMLA:
		events[0].GroupIdx = &full
		if b.kind == opStore {
			events[0].SpecKind = "mla_attention"
		}
	case b.kind == opStore:
		events[0].GroupIdx, events[0].SpecKind = &full, "full_attention"
		events = append(events,
			vllmpub.Event{Type: "BlockStored", BlockHashes: b.hashes, GroupIdx: &window, SpecKind: "sliding_window", SlidingWindow: 16},
			vllmpub.Event{Type: "BlockRemoved", BlockHashes: b.hashes, GroupIdx: &window})
	default:
		events[0].GroupIdx = &full
	}
	p, err := vllmpub.Encode(vllmpub.Batch{TS: 1, Events: events}, vllmpub.Form{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// send publishes b live, or loses it on the wire; a live batch that
// reveals a gap is let settle.
func (h *seqHarness) send(b seqBatch, lost bool) {
	h.t.Helper()
	b = h.m.publish(b)
	if lost {
		if err := h.p.Lose(context.Background(), h.payload(b)); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	gap, drops := h.m.live(b.seq)
	h.setDrops(drops) // before the batch that asks for the replay
	ended := h.replaysEnded()
	if err := h.p.Publish(context.Background(), h.payload(b)); err != nil {
		h.t.Fatal(err)
	}
	if gap {
		h.settle()
		// The index can show the replayed batches before the replay has
		// counted its result: a reconnect that read the counters then
		// raced the count.
		eventually(h.t, "the gap's replay to count its result", func() bool { return h.replaysEnded() > ended })
	}
}

// replaysEnded is the replays that ended, whatever their result.
func (h *seqHarness) replaysEnded() float64 {
	n := 0.0
	for _, result := range []string{"ok", "exhausted", "failed"} {
		n += h.f.counter(h.f.mgr.metrics.replays, "pod", result)
	}
	return n
}

// settle waits until the subscriber has applied the publisher's last batch
// and the index holds what the model says.
func (h *seqHarness) settle() {
	h.t.Helper()
	if h.m.next < h.m.seq { // lost batches wait for a live one
		h.send(seqBatch{kind: opStore, hashes: []uint64{h.m.newHash()}}, false)
		return
	}
	want := maps.Clone(h.m.index)
	wantSeq := int64(h.m.seq) - 1
	var got map[uint64]int
	var gotSeq int64
	eventually(h.t, "the stream to settle", func() bool {
		got, gotSeq = h.f.idx.hashes("pod"), lastSeq(h.f, "pod")
		return (wantSeq < 0 || gotSeq == wantSeq) && (maps.Equal(got, want) || len(got)+len(want) == 0)
	}, func() string {
		return fmt.Sprintf("last_seq %d, want %d; index %v, want %v (publisher holds %v)\nops: %s",
			gotSeq, wantSeq, got, want, h.m.cache, strings.Join(h.trace, " "))
	})
	h.setDrops(nil)
}

// waitUp waits until the subscriber is connected and has made replays
// more than before: its replay on connecting, and the one once idle.
func (h *seqHarness) waitUp(replays float64) {
	h.t.Helper()
	eventually(h.t, "the connection and its idle replay", func() bool {
		return h.f.connected("pod") && h.f.counter(h.f.mgr.metrics.replays, "pod", "ok") >= replays
	})
}

// runSequence plays data as operations: data[0] picks the replay buffer,
// each further byte is one operation.
func runSequence(t *testing.T, data []byte) {
	checkGoroutines(t)
	if len(data) == 0 {
		return
	}
	buffers := [...]int{2, 3, 5, 100}
	h := &seqHarness{t: t, drop: map[uint64]bool{}, model: int(data[0]) / len(buffers) % numModels}
	h.m = &seqModel{buffer: buffers[int(data[0])%len(buffers)], cache: multiset{}, index: multiset{}}
	ops := data[1:]
	if len(ops) > maxSeqOps {
		ops = ops[:maxSeqOps]
	}
	h.p = startPubWith(t, 0, 0, h.m.buffer, h.dropReply)
	cfg := testConfig()
	cfg.PollInterval = 2 * time.Millisecond // idle replays come quickly
	cfg.Hash.Algorithm = ""                 // no verification: the hashes are made up
	h.f = newFleet(t, cfg)
	h.f.follow("pod", h.p)
	h.waitUp(2)
	reconnects := 0
	for _, b := range ops {
		op, arg := int(b)%numSeqOps, int(b)/numSeqOps
		h.trace = append(h.trace, fmt.Sprintf("%s(%d)", seqOpNames[op], arg))
		switch op {
		case opStore:
			hs := []uint64{h.m.newHash()}
			if held, ok := h.m.held(arg); ok && arg%2 == 1 {
				hs = append(hs, held)
			}
			h.send(seqBatch{kind: opStore, hashes: hs}, false)
		case opRemove, opLoseOther:
			lost := op == opLoseOther
			if held, ok := h.m.held(arg / 2); ok && (!lost || arg%2 == 0) {
				h.send(seqBatch{kind: opRemove, hashes: []uint64{held}}, lost)
			} else {
				h.send(seqBatch{kind: opClear}, lost)
			}
		case opClear:
			h.send(seqBatch{kind: opClear}, false)
		case opLoseStore, opLoseDrop:
			h.send(seqBatch{kind: opStore, hashes: []uint64{h.m.newHash()}}, true)
			if op == opLoseDrop {
				h.m.drops = append(h.m.drops, h.m.seq-1)
			}
		case opRestart:
			h.settle()
			h.m.newProcess()
			if err := h.p.Reset(context.Background()); err != nil {
				t.Fatal(err)
			}
			h.send(seqBatch{kind: opStore, hashes: []uint64{h.m.newHash()}}, false)
			h.settle()
		case opReconnect:
			if reconnects++; reconnects > maxReconnects {
				h.send(seqBatch{kind: opStore, hashes: []uint64{h.m.newHash()}}, false)
				continue
			}
			h.settle()
			replays := h.f.counter(h.f.mgr.metrics.replays, "pod", "ok")
			probe := h.m.next > 0 // the replay that finds the new process
			h.p.stop()
			eventually(t, "disconnection", func() bool { return !h.f.connected("pod") })
			h.p = startPubWith(t, h.p.eventPort, h.p.replayPort, h.m.buffer, h.dropReply)
			h.m.newProcess()
			if probe {
				replays++
			}
			h.waitUp(replays + 2)
			h.send(seqBatch{kind: opStore, hashes: []uint64{h.m.newHash()}}, false)
			h.settle()
		}
	}
	h.settle()
	trace := strings.Join(h.trace, " ")
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"gaps", h.f.counter(h.f.mgr.metrics.gaps, "pod"), h.m.gaps},
		{"replays{exhausted}", h.f.counter(h.f.mgr.metrics.replays, "pod", "exhausted"), h.m.exhausted},
		{"replays{retried}", h.f.counter(h.f.mgr.metrics.replays, "pod", "retried"), h.m.retried},
		{"replays{failed}", h.f.counter(h.f.mgr.metrics.replays, "pod", "failed"), 0},
		{"restarts", h.f.counter(h.f.mgr.metrics.restarts, "pod"), h.m.restarts},
		{"clears{restart}", h.f.counter(h.f.mgr.metrics.clears, "pod", "restart"), h.m.restarts},
		{"clears{exhausted}", h.f.counter(h.f.mgr.metrics.clears, "pod", "exhausted"), h.m.exhaustedClears},
		{"clears{all_blocks_cleared}", h.f.counter(h.f.mgr.metrics.clears, "pod", "all_blocks_cleared"), h.m.allCleared},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v\nops: %s", c.name, c.got, c.want, trace)
		}
	}
	// Unless a gap outran the replay buffer (cleared and counted above), the
	// index holds exactly what the publisher does.
	if h.m.exhausted == 0 && !maps.Equal(h.m.index, h.m.cache) {
		t.Errorf("model: index %v but the publisher holds %v with no exhausted replay\nops: %s", h.m.index, h.m.cache, trace)
	}
}

// seqOps encodes a seed: the buffer choice, then the operations.
func seqOps(buffer byte, ops ...int) []byte {
	b := []byte{buffer}
	for _, op := range ops {
		b = append(b, byte(op))
	}
	return b
}

// FuzzSequence plays random interleavings of stores, removals, clears,
// batches lost on the wire (some with a replay reply dropped as well),
// publisher restarts and reconnections to a new publisher against a real
// publisher and subscriber, from a pod of one group, of one MLA group, or
// of full-attention and sliding-window groups, and checks that once the stream settles the
// pod's index entries equal a model of the publisher's cache, or, where a
// gap outran the replay buffer, what the protocol then implies: a clear,
// counted, and the batches still buffered.
func FuzzSequence(f *testing.F) {
	const big, small = 3, 0 // buffers 100 and 2
	f.Add(seqOps(big, opStore, opStore+numSeqOps, opRemove, opStore, opClear, opStore))
	f.Add(seqOps(big, opStore, opLoseStore, opLoseOther, opLoseDrop, opStore, opRemove))
	f.Add(seqOps(small, opStore, opLoseStore, opLoseStore, opLoseStore, opStore, opStore))
	f.Add(seqOps(small, opLoseStore, opLoseOther, opLoseStore, opClear, opStore))
	f.Add(seqOps(big, opStore, opStore, opRestart, opStore, opLoseStore, opStore))
	f.Add(seqOps(1, opStore, opLoseStore, opReconnect, opStore, opRestart, opLoseOther))
	f.Add(seqOps(2, opLoseStore, opLoseStore, opLoseDrop, opLoseDrop, opRemove, opLoseStore))
	const mla, hybrid = 4 * modelMLA, 4 * modelHybrid
	f.Add(seqOps(big+mla, opStore, opStore+numSeqOps, opRemove, opStore, opClear, opStore))
	f.Add(seqOps(big+hybrid, opStore, opStore+numSeqOps, opRemove, opStore, opRemove, opStore))
	f.Add(seqOps(small+hybrid, opStore, opLoseStore, opLoseOther, opStore, opRestart, opRemove))
	f.Fuzz(runSequence)
}
