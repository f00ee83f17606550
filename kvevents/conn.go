package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// monitorSeq numbers the inproc endpoints of socket monitors.
var monitorSeq atomic.Uint64

// maxDrain bounds the messages read between two polls, so shutdown and
// connection events are seen under load.
const maxDrain = 4096

// endpoint is the pod's address at port.
func (st *stream) endpoint(port int) string {
	return "tcp://" + net.JoinHostPort(st.pod.IP, strconv.Itoa(port))
}

// port is the stream's rank's port: the pod's configured one, or the
// default, + the rank (vLLM's numbering: rank k publishes on port + k).
func (st *stream) port(configured, def int) int {
	if configured > 0 {
		return configured + st.rank
	}
	return def + st.pod.DPRank + st.rank
}

// run connects, follows the rank until the connection is lost, waits a
// jittered backoff and starts over, until ctx is done. Sockets live only
// inside session, so a pod that is down holds none and costs no CPU while
// its subscriber waits.
func (st *stream) run(ctx context.Context) {
	bo := backoff{min: st.cfg.BackoffMin, max: st.cfg.BackoffMax}
	clock := st.cfg.clock()
	var warned time.Time // the last WARN of a lost or refused stream
	for {
		connected, err := st.session(ctx)
		st.state.setConnected(false)
		if ctx.Err() != nil {
			return
		}
		// One WARN a minute at most: a pod whose event port stays shut, or
		// a path that keeps dropping, is a gauge (connected 0) and a
		// counter (reconnects_total), not a line every backoff.
		if connected || err != nil {
			msg, args := "kvevents: lost the pod's events; reconnecting", []any{"pod", st.pod.Name, "rank", st.rank}
			if !connected {
				msg = "kvevents: subscription failed"
			}
			if err != nil {
				args = append(args, "err", err)
			}
			if now := time.Now(); now.Sub(warned) >= time.Minute {
				warned = now
				st.log.Warn(msg, args...)
			} else {
				st.log.Debug(msg, args...)
			}
		}
		st.m.reconnects.Inc()
		if connected {
			bo.reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-clock.After(bo.next()):
		}
	}
}

// session holds one connection: it returns when the connection is refused
// or lost (connected says whether it was ever up) or ctx is done.
func (st *stream) session(ctx context.Context) (connected bool, err error) {
	if err := st.locate(ctx); err != nil {
		return false, err
	}
	sub, mon, err := st.dial()
	if err != nil {
		return false, err
	}
	st.mon, st.lost = mon, false
	defer func() {
		st.mon = nil
		err = errors.Join(err, closeMonitored(sub, mon))
	}()
	poller := zmq.NewPoller()
	poller.Add(sub, zmq.POLLIN)
	poller.Add(mon, zmq.POLLIN)
	window := newBatchWindow(st.cfg.BatchWindow)
	defer window.stop()
	recv := newReader(sub)
	defer recv.close()
	for ctx.Err() == nil && !st.lost {
		polled, err := poller.Poll(st.cfg.PollInterval)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(4) { // EINTR
				continue
			}
			return connected, fmt.Errorf("kvevents: poll: %w", err)
		}
		if connected && len(polled) == 0 {
			st.detachLast()
			st.catchUp(ctx)
		}
		for _, p := range polled {
			if p.Socket == mon {
				up, down := st.onMonitor(mon)
				if up && !connected {
					connected = true
					st.state.setConnected(true)
					st.resume(ctx)
				}
				if down {
					return connected, nil
				}
				continue
			}
			n, err := recv.drain(maxDrain, func(frames [][]byte) { st.onMessage(ctx, frames) })
			if err != nil {
				return connected, err
			}
			if n >= busyRun {
				window.wait(ctx)
			}
		}
	}
	return connected, nil
}

// busyRun is the run of batches that shows a socket busier than one read
// per batch can follow; only then does the stream wait a batch window. A
// stream that gives up its P after every read slowed the whole process
// with many pods (100 pods at 20 batches/s each: ext_proc streams queued
// for seconds behind stream goroutines re-entering libzmq's poll), so a
// pod's ordinary pace is read as it comes.
const busyRun = 64

// batchWindow lets batches accumulate between two reads of a busy socket
// (Config.BatchWindow): each read then takes a run of batches, and the
// applier, which runs while the stream waits, applies them in one go. One
// wake-up per batch costs more than decoding and applying it.
type batchWindow struct {
	d     time.Duration
	timer *time.Timer
}

func newBatchWindow(d time.Duration) *batchWindow {
	w := &batchWindow{d: d}
	if d > 0 {
		w.timer = time.NewTimer(d)
		w.timer.Stop()
	}
	return w
}

// wait returns after the window or when ctx is done.
func (w *batchWindow) wait(ctx context.Context) {
	if w.timer == nil {
		return
	}
	w.timer.Reset(w.d)
	select {
	case <-w.timer.C:
	case <-ctx.Done():
		w.timer.Stop()
	}
}

func (w *batchWindow) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// dial creates the SUB socket with its monitor and connects it. libzmq's
// own reconnection is off: run owns the retry policy.
func (st *stream) dial() (sub, mon *zmq.Socket, err error) {
	sub, err = zmq.NewSocket(zmq.SUB)
	if err != nil {
		return nil, nil, fmt.Errorf("kvevents: new SUB socket: %w", err)
	}
	addr := fmt.Sprintf("inproc://kvevents-monitor-%d", monitorSeq.Add(1))
	errs := []error{
		sub.SetLinger(0), sub.SetReconnectIvl(-1), sub.SetRcvhwm(100000),
		sub.SetSubscribe(st.src.Topic),
		sub.Monitor(addr, zmq.EVENT_HANDSHAKE_SUCCEEDED|zmq.EVENT_DISCONNECTED|zmq.EVENT_CLOSED|
			zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL|zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL),
	}
	if hb := st.cfg.HeartbeatInterval; hb > 0 {
		errs = append(errs, sub.SetHeartbeatIvl(hb), sub.SetHeartbeatTimeout(3*hb))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("kvevents: configure SUB socket: %w", err), closeMonitored(sub, nil))
	}
	mon, err = zmq.NewSocket(zmq.PAIR)
	if err == nil {
		err = errors.Join(mon.SetLinger(0), mon.Connect(addr))
	}
	if err == nil {
		err = sub.Connect(st.src.Endpoint)
	}
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("kvevents: connect: %w", err), closeMonitored(sub, mon))
	}
	return sub, mon, nil
}

// onMonitor reads the pending monitor events: up when the handshake with
// the publisher succeeded, down when the connection was refused or lost.
func (st *stream) onMonitor(mon *zmq.Socket) (up, down bool) {
	for {
		ev, _, _, err := mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return up, down
		}
		switch ev {
		case zmq.EVENT_HANDSHAKE_SUCCEEDED:
			up = true
		default:
			down = true
		}
	}
}

// closeMonitored stops sub's monitor before closing sub and then mon.
// Closing sub first would let libzmq's I/O thread report the connection's
// teardown after mon is gone, and a monitor event sent to a PAIR socket
// with no peer blocks that thread, which stalls every socket of the process.
func closeMonitored(sub, mon *zmq.Socket) error {
	return errors.Join(sub.Monitor("", 0), closeSockets(sub, mon))
}

func closeSockets(socks ...*zmq.Socket) error {
	var errs []error
	for _, s := range socks {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// errReplayHole reports replies missing inside a replay: a ROUTER drops
// what its full pipe to the subscriber cannot take, replies and end marker
// alike, so a replay faster than the network loses its middle.
var errReplayHole = errors.New("kvevents: replay replies missing")

// errNoReplay is a replay of a rank whose pod announced no replay
// endpoint.
var errNoReplay = errors.New("kvevents: the pod serves no replay")

// replayRetries bounds the new requests after a replay with holes.
const replayRetries = 3

// errConnLost ends a replay whose subscription lost its connection: the
// publisher is gone, and would never answer.
var errConnLost = errors.New("kvevents: connection lost during a replay")

// replayFrom asks the rank's replay ROUTER for every buffered batch from
// seq on and accepts them in order, until the end marker, ctx, or
// ReplayTimeout. A reply stream with a hole is asked again from the hole.
// It reports whether the replay completed.
func (st *stream) replayFrom(ctx context.Context, from uint64) bool {
	err := st.doReplay(ctx, from)
	for try := 0; errors.Is(err, errReplayHole) && try < replayRetries; try++ {
		st.m.replayRetried.Inc()
		err = st.doReplay(ctx, st.next)
	}
	if errors.Is(err, errConnLost) {
		return false // the session ends; the next connection replays again
	}
	if errors.Is(err, errNoReplay) {
		return false // batches lost are a gap the pod cannot fill
	}
	if err == nil {
		st.m.replayOK.Inc()
		// A complete replay from 0 that returned nothing still tells where
		// the rank stands: seq 0 comes next, and a live batch after it is
		// a gap.
		st.started = st.started || from == 0
		return true
	}
	if ctx.Err() == nil {
		st.m.replayFailed.Inc()
		st.log.Warn("kvevents: replay failed", "pod", st.pod.Name, "rank", st.rank, "from", from, "err", err)
	}
	return false
}

func (st *stream) doReplay(ctx context.Context, from uint64) (err error) {
	dealer, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		return fmt.Errorf("kvevents: new DEALER socket: %w", err)
	}
	defer func() { err = errors.Join(err, dealer.Close()) }()
	// No receive limit: the ROUTER drops replies a full pipe cannot take
	// (the end marker among them), and a replay holds at most the pod's
	// buffer_steps batches.
	if st.src.Replay == "" {
		return errNoReplay
	}
	if err := errors.Join(dealer.SetLinger(0), dealer.SetRcvhwm(0), dealer.Connect(st.src.Replay)); err != nil {
		return fmt.Errorf("kvevents: connect DEALER: %w", err)
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	if _, err := dealer.SendMessage([]byte{}, start[:]); err != nil {
		return fmt.Errorf("kvevents: send replay request: %w", err)
	}
	poller := zmq.NewPoller()
	poller.Add(dealer, zmq.POLLIN)
	if st.mon != nil {
		poller.Add(st.mon, zmq.POLLIN) // a publisher gone mid-replay answers nothing
	}
	deadline := time.Now().Add(st.cfg.ReplayTimeout)
	first := true
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("kvevents: replay timed out")
		}
		if _, err := poller.Poll(min(left, st.cfg.PollInterval)); err != nil && zmq.AsErrno(err) != zmq.Errno(4) {
			return fmt.Errorf("kvevents: poll DEALER: %w", err)
		}
		if st.mon != nil {
			if _, down := st.onMonitor(st.mon); down {
				st.lost = true
				return errConnLost
			}
		}
		for range maxDrain {
			frames, err := dealer.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				break
			}
			seq, payload, end, ok := replayFrames(frames)
			switch {
			case !ok:
				st.m.decodeErrors.Inc()
			case end:
				return nil
			case !first && st.started && seq > st.next && !st.probe.restarted:
				// Not the buffer's start moving on (that shows in the first
				// reply): replies were dropped on the way.
				return errReplayHole
			default:
				first = false
				st.accept(ctx, seq, payload, false)
			}
		}
	}
	return ctx.Err()
}
