package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"runtime"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// item is one entry of a pod's queue from its streams to its applier: a
// batch, or an order to clear the pod's entries first.
type item struct {
	payload []byte
	seq     uint64
	rank    *rankState // the batch's rank, told once the batch is applied
	clear   clearReason
}

// stream follows one DP rank of one pod: it owns that rank's sockets (see
// conn.go) and turns what they receive into an in-order, gap-free sequence
// of batches on the pod's queue. Only its own goroutine touches it.
type stream struct {
	cfg   *Config
	pod   pod.Pod
	rank  int
	out   chan<- item
	log   *slog.Logger
	m     *podMetrics
	state *rankState
	src   Source // where the rank publishes, found at each session's start

	next         uint64 // the sequence number expected next
	started      bool   // next is meaningful: a batch was taken, or a replay from 0 completed
	hasState     bool   // batches were queued since the last clear
	sessionStart uint64 // the replay start of the current connection
	lastLive     uint64 // the last live batch of the current connection
	liveSeen     bool   // lastLive is meaningful
	recheck      bool   // replay once idle: a batch may have been missed
	last         []byte // the last batch queued (received frames are never reused)
	lastShared   bool   // last lies in the buffer of a whole run of live batches
	probe        probe
	// mon is the current connection's monitor, watched during replays too;
	// lost says a replay saw the connection go down: the session ends.
	mon  *zmq.Socket
	lost bool
}

// probe checks, after a reconnection, that the publisher is the process
// whose batches were taken: its replay of the last batch taken must be that
// very batch.
type probe struct {
	active    bool   // the next replayed batch is the probe's answer
	seq       uint64 // the last batch taken
	restarted bool   // the answer proved a new process: ignore the rest
}

// resume follows a (re)connection. A new process numbers its batches from 0
// again, so a sequence number alone cannot tell it from the old one once it
// has published as many: the replay starts at the last batch taken, which
// the same process returns unchanged. Anything else (another batch, or
// nothing where the old process would still hold it) means a restart: the
// pod's entries are cleared and the new process is replayed from 0.
func (st *stream) resume(ctx context.Context) {
	st.sessionStart, st.recheck, st.liveSeen = st.next, true, false
	if !st.started || st.next == 0 {
		st.replayFrom(ctx, st.next)
		return
	}
	st.probe = probe{active: true, seq: st.next - 1}
	ok := st.replayFrom(ctx, st.next-1)
	restarted := st.probe.restarted || (ok && st.probe.active)
	st.probe = probe{}
	if restarted {
		st.restart(ctx, st.next-1)
	}
}

// restart clears the pod after its publisher restarted and replays the new
// process from its first batch.
func (st *stream) restart(ctx context.Context, seq uint64) {
	st.m.restarts.Inc()
	st.log.Warn("kvevents: publisher restarted", "pod", st.pod.Name, "rank", st.rank, "seq", seq, "expected", st.next)
	st.queueClear(ctx, clearRestart)
	st.next, st.sessionStart = 0, 0
	st.replayFrom(ctx, 0)
}

// accept takes batch seq, live from the SUB socket or replayed. It skips
// what was already taken, fills a live gap by replay, clears the pod when a
// gap cannot be filled or the publisher restarted, and queues the batch.
func (st *stream) accept(ctx context.Context, seq uint64, payload []byte, live bool) {
	if !live && st.probe.active {
		st.probe.active = false
		st.probe.restarted = seq == st.probe.seq && !bytes.Equal(payload, st.last)
		if seq == st.probe.seq {
			return
		}
	}
	if !live && st.probe.restarted {
		return
	}
	if live {
		// One process publishes in order, so a live batch older than the
		// connection's replay or than a live batch before it comes from
		// a new process.
		back := seq < st.sessionStart || (st.liveSeen && seq <= st.lastLive)
		st.lastLive, st.liveSeen = seq, true
		if st.started && back {
			st.restart(ctx, seq) // the sequence went backwards
		}
	}
	if st.started && seq < st.next {
		return // already taken (a replay overlapping the live stream)
	}
	if st.started && seq > st.next && live {
		st.m.gaps.Inc()
		st.replayFrom(ctx, st.next)
		if seq < st.next {
			return
		}
	}
	if st.started && seq > st.next {
		st.m.replayExhausted.Inc()
		if st.hasState {
			st.log.Warn("kvevents: sequence gap older than the replay buffer",
				"pod", st.pod.Name, "rank", st.rank, "from", st.next, "to", seq)
			st.queueClear(ctx, clearExhausted)
		}
	}
	st.started = true
	if len(payload) > st.cfg.MaxMessageSize {
		st.m.oversize.Inc()
	} else if !st.queue(ctx, item{payload: payload, seq: seq, rank: st.state}, live) {
		return // dropped: the next live batch finds the gap and replays it
	}
	st.next, st.hasState, st.last, st.lastShared = seq+1, true, payload, live
}

// detachLast copies the last batch taken out of the buffer of the run it
// was read in (see reader), so that an idle connection keeps one batch for
// its restart probe rather than the whole run.
func (st *stream) detachLast() {
	if st.lastShared {
		st.last, st.lastShared = bytes.Clone(st.last), false
	}
}

// queue sends it to the applier: a live batch only if there is room (the
// socket must keep being read), a replayed one waiting for room.
func (st *stream) queue(ctx context.Context, it item, live bool) bool {
	if live {
		if len(st.out) == cap(st.out) {
			// With few Ps the applier may simply not have run yet: give it
			// the CPU once before counting the batch as lost.
			runtime.Gosched()
		}
		select {
		case st.out <- it:
			return true
		default:
			st.m.queueDrops.Inc()
			st.m.gaps.Inc()
			st.recheck = true
			return false
		}
	}
	select {
	case st.out <- it:
		return true
	case <-ctx.Done():
		return false
	}
}

// catchUp runs when the connection is idle: if a batch may have been missed
// (dropped for a full queue, or published between the replay after connecting
// and the subscription reaching the publisher), it replays from the next
// expected batch, so a pod that goes quiet is not left stale.
func (st *stream) catchUp(ctx context.Context) {
	if !st.recheck || len(st.out) >= cap(st.out) {
		return
	}
	st.recheck = false
	st.replayFrom(ctx, st.next)
}

func (st *stream) queueClear(ctx context.Context, r clearReason) {
	if st.queue(ctx, item{clear: r}, false) {
		st.hasState = false
	}
}

// onMessage handles one multipart message of the SUB socket:
// [topic, seq (8 bytes big-endian), payload].
func (st *stream) onMessage(ctx context.Context, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		st.m.decodeErrors.Inc()
		return
	}
	st.accept(ctx, binary.BigEndian.Uint64(frames[1]), frames[2], true)
}

// replayFrames parses one reply of the replay ROUTER, [b"", seq, payload]
// or [b"", topic, seq, payload]; end is true for the end marker (seq -1).
func replayFrames(frames [][]byte) (seq uint64, payload []byte, end, ok bool) {
	if len(frames) < 3 || len(frames) > 4 || len(frames[0]) != 0 {
		return 0, nil, false, false
	}
	s, p := frames[len(frames)-2], frames[len(frames)-1]
	if len(s) != 8 {
		return 0, nil, false, false
	}
	seq = binary.BigEndian.Uint64(s)
	return seq, p, seq == math.MaxUint64, true
}
