package kvevents

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock hands every After request to the test, which fires it.
type fakeClock struct {
	reqs chan fakeTimer
	done chan struct{}
}

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	t := fakeTimer{d: d, c: make(chan time.Time, 1)}
	select {
	case f.reqs <- t:
	case <-f.done:
	}
	return t.c
}

// closedPort returns a port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAbsentPodBacksOff follows a pod nobody serves: every attempt is
// refused at once, and between attempts the subscriber waits on the clock
// (holding no socket, using no CPU) for jittered delays doubling from
// BackoffMin to BackoffMax.
func TestAbsentPodBacksOff(t *testing.T) {
	checkGoroutines(t)
	clock := &fakeClock{reqs: make(chan fakeTimer), done: make(chan struct{})}
	cfg := testConfig()
	cfg.BackoffMin, cfg.BackoffMax, cfg.Clock = time.Second, 30*time.Second, clock
	f := newFleet(t, cfg)
	t.Cleanup(func() { close(clock.done) }) // LIFO: releases a pending After before the fleet stops
	p := closedPort(t)
	f.follow("pod-a", &pub{eventPort: p, replayPort: p})
	for i, ceil := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		ceil *= time.Second
		var req fakeTimer
		select {
		case req = <-clock.reqs:
		case <-time.After(10 * time.Second):
			t.Fatalf("attempt %d: no backoff requested", i)
		}
		if req.d < ceil/2 || req.d > ceil {
			t.Errorf("attempt %d: backoff %v, want in [%v, %v]", i, req.d, ceil/2, ceil)
		}
		if got := f.counter(f.mgr.metrics.reconnects, "pod-a"); got != float64(i+1) {
			t.Errorf("attempt %d: reconnects = %v, want %d", i, got, i+1)
		}
		select {
		case req2 := <-clock.reqs:
			t.Fatalf("attempt %d: another backoff (%v) requested before the first fired", i, req2.d)
		default:
		}
		req.c <- time.Time{}
	}
	if f.connected("pod-a") {
		t.Error("connected to an absent pod")
	}
}

// freePorts returns the first of n consecutive free ports.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(40000)
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		ok := len(ls) == n
		for _, l := range ls {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// TestDataParallelRanks follows a pod of DP size 2: rank k publishes and
// replays on the ports + k, with its own sequence.
func TestDataParallelRanks(t *testing.T) {
	checkGoroutines(t)
	ev, rp := freePorts(t, 2), freePorts(t, 2)
	r0, r1 := startPub(t, ev, rp, 100), startPub(t, ev+1, rp+1, 100)
	r0.publish(t, 1)
	r1.publish(t, 2)
	f := newFleet(t, testConfig())
	if err := f.mgr.Ensure(pod.Pod{Name: "pod-a", IP: "127.0.0.1", EventPort: ev, ReplayPort: rp, Model: "m", DPSize: 2}); err != nil {
		t.Fatal(err)
	}
	f.waitHashes("pod-a", 1, 2)
	r1.publish(t, 3)
	r1.lose(t, 4)
	r1.publish(t, 5)
	r0.publish(t, 6)
	f.waitHashes("pod-a", 1, 2, 3, 4, 5, 6)
	for rank, want := range []float64{1, 3} {
		if got := testutil.ToFloat64(f.mgr.metrics.lastSeq.WithLabelValues("pod-a", fmt.Sprint(rank))); got != want {
			t.Errorf("last_seq{rank=%d} = %v, want %v", rank, got, want)
		}
	}
	st := f.mgr.Status()
	if len(st) != 1 || len(st[0].Ranks) != 2 {
		t.Fatalf("Status() = %+v, want pod-a with two ranks", st)
	}
	for k, r := range st[0].Ranks {
		want := RankStatus{Rank: k, Connected: true, LastSeq: []int64{1, 3}[k]}
		src := Source{From: "ports", Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", ev+k), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", rp+k), Topic: f.mgr.cfg.Topic}
		if r.Source == nil || *r.Source != src {
			t.Errorf("rank %d's source = %+v, want %+v", k, r.Source, src)
		}
		if r.Source = nil; r != want {
			t.Errorf("rank %d = %+v, want %+v", k, r, want)
		}
	}
}

func TestReplayFrames(t *testing.T) {
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 7}
	end := []byte{255, 255, 255, 255, 255, 255, 255, 255}
	tests := []struct {
		frames      [][]byte
		seq         uint64
		end, ok     bool
		wantPayload string
	}{
		{[][]byte{{}, seq, []byte("p")}, 7, false, true, "p"},
		{[][]byte{{}, []byte("topic"), seq, []byte("p")}, 7, false, true, "p"},
		{[][]byte{{}, end, {}}, 1<<64 - 1, true, true, ""},
		{[][]byte{{}, end}, 0, false, false, ""},
		{[][]byte{{1}, seq, []byte("p")}, 0, false, false, ""},
		{[][]byte{{}, seq[:7], []byte("p")}, 0, false, false, ""},
	}
	for i, tc := range tests {
		s, p, end, ok := replayFrames(tc.frames)
		if ok != tc.ok || (ok && (s != tc.seq || end != tc.end || string(p) != tc.wantPayload)) {
			t.Errorf("%d: replayFrames(%q) = %d, %q, %v, %v; want %d, %q, %v, %v",
				i, tc.frames, s, p, end, ok, tc.seq, tc.wantPayload, tc.end, tc.ok)
		}
	}
}
