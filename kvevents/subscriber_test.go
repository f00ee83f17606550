package kvevents

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
)

type fleet struct {
	t   *testing.T
	idx *recIndex
	mgr *Manager
}

// testConfig is the subscribers' configuration for the transport tests:
// short delays, and rekeying off, since their publishers' synthetic hashes
// mismatch and the tests follow the pod's own hashes (rekey_test.go and the
// end-to-end tests rekey).
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.BackoffMin, cfg.BackoffMax = 5*time.Millisecond, 20*time.Millisecond
	cfg.PollInterval = 10 * time.Millisecond
	cfg.ReplayTimeout = 20 * time.Second // a bound on a replay that never ends; a loaded host is slow, not lost
	cfg.RekeyBlocks = 0
	return cfg
}

func newFleet(t *testing.T, cfg Config) *fleet {
	t.Helper()
	f := &fleet{t: t, idx: newRecIndex(t)}
	mgr, err := NewManager(cfg, f.idx, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f.mgr = mgr
	runBackground(t, mgr.Run)
	return f
}

// pub is a running vllmpub.Publisher.
type pub struct {
	*vllmpub.Publisher
	eventPort, replayPort int
	stop                  func()
}

func port(t testing.TB, endpoint string) int {
	t.Helper()
	p, err := strconv.Atoi(endpoint[strings.LastIndexByte(endpoint, ':')+1:])
	if err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return p
}

// startPub runs a publisher bound on the given ports (0: free ones).
func startPub(t *testing.T, eventPort, replayPort, buffer int) *pub {
	t.Helper()
	return startPubWith(t, eventPort, replayPort, buffer, nil)
}

// startPubWith is startPub with a vllmpub.Config.DropReply.
func startPubWith(t *testing.T, eventPort, replayPort, buffer int, drop func(uint64) bool) *pub {
	t.Helper()
	ep := func(p int) string {
		if p == 0 {
			return "tcp://127.0.0.1:*"
		}
		return "tcp://127.0.0.1:" + strconv.Itoa(p)
	}
	cfg := vllmpub.DefaultConfig()
	cfg.Endpoint, cfg.ReplayEndpoint, cfg.BufferSteps = ep(eventPort), ep(replayPort), buffer
	cfg.DropReply = drop
	// A publisher coming back on its predecessor's ports may find them still
	// bound for a moment: libzmq releases a closed socket's listener on its
	// I/O thread, after Close returns.
	var p *vllmpub.Publisher
	var err error
	eventually(t, "the publisher's ports", func() bool {
		p, err = vllmpub.New(cfg)
		return err == nil || !strings.Contains(err.Error(), "address already in use")
	}, func() string { return fmt.Sprint(err) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var stopped bool
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("publisher Run() = %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return &pub{Publisher: p, eventPort: port(t, p.Endpoint()), replayPort: port(t, p.ReplayEndpoint()), stop: stop}
}

func storedPayload(t *testing.T, hashes ...uint64) []byte {
	t.Helper()
	b, err := vllmpub.Encode(vllmpub.Batch{TS: 1, Events: []vllmpub.Event{{Type: "BlockStored", BlockHashes: hashes}}}, vllmpub.Form{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (p *pub) publish(t *testing.T, hashes ...uint64) {
	t.Helper()
	if err := p.Publish(context.Background(), storedPayload(t, hashes...)); err != nil {
		t.Fatal(err)
	}
}

func (p *pub) lose(t *testing.T, hashes ...uint64) {
	t.Helper()
	if err := p.Lose(context.Background(), storedPayload(t, hashes...)); err != nil {
		t.Fatal(err)
	}
}

func (f *fleet) follow(name string, p *pub) {
	f.t.Helper()
	err := f.mgr.Ensure(pod.Pod{Name: name, IP: "127.0.0.1", EventPort: p.eventPort, ReplayPort: p.replayPort, Model: "m"})
	if err != nil {
		f.t.Fatal(err)
	}
}

// waitHashes waits until the pod's live hashes are exactly want.
func (f *fleet) waitHashes(name string, want ...uint64) {
	f.t.Helper()
	w := map[uint64]int{}
	for _, h := range want {
		w[h]++
	}
	var got map[uint64]int
	eventually(f.t, "hashes of "+name, func() bool {
		got = f.idx.hashes(name)
		return maps.Equal(got, w) || (len(got) == 0 && len(w) == 0)
	}, func() string { return fmt.Sprintf("got %v, want %v", got, w) })
}

func (f *fleet) counter(c *prometheus.CounterVec, labels ...string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(labels...))
}

func (f *fleet) connected(name string) bool {
	return testutil.ToFloat64(f.mgr.metrics.connected.WithLabelValues(name, "0")) == 1
}

func TestSubscriberReplaysWhatItMissed(t *testing.T) {
	checkGoroutines(t)
	p := startPub(t, 0, 0, 100)
	p.publish(t, 1, 2) // before anyone listens: only replay can deliver it
	f := newFleet(t, testConfig())
	f.follow("pod-a", p)
	f.waitHashes("pod-a", 1, 2)
	p.publish(t, 3)
	f.waitHashes("pod-a", 1, 2, 3)
	// Once idle after connecting, the subscriber replays once more (a batch
	// published while its subscription was on its way would be lost otherwise).
	eventually(t, "the idle replay", func() bool { return f.counter(f.mgr.metrics.replays, "pod-a", "ok") >= 2 })
	p.lose(t, 4) // lost on the wire, kept in the replay buffer
	p.publish(t, 5)
	f.waitHashes("pod-a", 1, 2, 3, 4, 5)
	// The replayed batches can reach the index before the replay's end
	// marker is read and counted.
	eventually(t, "the gap's replay counted", func() bool { return f.counter(f.mgr.metrics.replays, "pod-a", "ok") >= 3 },
		func() string { return fmt.Sprintf("replays ok = %v", f.counter(f.mgr.metrics.replays, "pod-a", "ok")) })
	if got := f.counter(f.mgr.metrics.gaps, "pod-a"); got != 1 {
		t.Errorf("gaps = %v, want 1", got)
	}
	if got := f.counter(f.mgr.metrics.replays, "pod-a", "ok"); got != 3 {
		t.Errorf("replays ok = %v, want 3 (connect, idle, gap)", got)
	}
}

func TestSubscriberAsksAgainForDroppedReplies(t *testing.T) {
	checkGoroutines(t)
	var dropped atomic.Bool
	p := startPubWith(t, 0, 0, 100, func(seq uint64) bool {
		return seq == 2 && dropped.CompareAndSwap(false, true) // the first reply of batch 2 only
	})
	f := newFleet(t, testConfig())
	f.follow("pod-a", p)
	eventually(t, "connection", func() bool { return f.connected("pod-a") })
	eventually(t, "the idle replay", func() bool { return f.counter(f.mgr.metrics.replays, "pod-a", "ok") >= 2 })
	p.publish(t, 0)
	f.waitHashes("pod-a", 0)
	p.lose(t, 1)
	p.lose(t, 2)
	p.lose(t, 3)
	p.publish(t, 4) // gap: the replay of 1..4 comes back without 2
	f.waitHashes("pod-a", 0, 1, 2, 3, 4)
	if !dropped.Load() {
		t.Fatal("the publisher never dropped the reply of batch 2")
	}
	if got := f.counter(f.mgr.metrics.replays, "pod-a", "retried"); got != 1 {
		t.Errorf("replays{retried} = %v, want 1", got)
	}
	if got := f.counter(f.mgr.metrics.clears, "pod-a", "exhausted"); got != 0 {
		t.Errorf("clears{exhausted} = %v, want 0: the batches were still buffered", got)
	}
}

func TestSubscriberClearsOnExhaustedReplay(t *testing.T) {
	checkGoroutines(t)
	p := startPub(t, 0, 0, 2)
	f := newFleet(t, testConfig())
	f.follow("pod-a", p)
	eventually(t, "connection", func() bool { return f.connected("pod-a") })
	p.publish(t, 1)
	f.waitHashes("pod-a", 1)
	p.lose(t, 2)
	p.lose(t, 3)
	p.lose(t, 4)
	p.publish(t, 5) // the buffer of 2 now holds 4 and 5: 2 and 3 are gone
	f.waitHashes("pod-a", 4, 5)
	if got := f.counter(f.mgr.metrics.clears, "pod-a", "exhausted"); got != 1 {
		t.Errorf("clears{exhausted} = %v, want 1", got)
	}
}

func TestSubscriberClearsOnRestart(t *testing.T) {
	checkGoroutines(t)
	p := startPub(t, 0, 0, 100)
	f := newFleet(t, testConfig())
	f.follow("pod-a", p)
	for h := range uint64(5) {
		p.publish(t, 10+h)
	}
	f.waitHashes("pod-a", 10, 11, 12, 13, 14)
	p.stop() // the pod's vLLM dies...
	eventually(t, "disconnection", func() bool { return !f.connected("pod-a") })
	p2 := startPub(t, p.eventPort, p.replayPort, 100) // ...and comes back, seq from 0
	p2.publish(t, 20)
	p2.publish(t, 21)
	eventually(t, "reconnection", func() bool { return f.connected("pod-a") })
	// A batch published before the subscription reaches the new publisher is
	// lost to PUB/SUB's slow joiner, so publish until the restart is seen.
	next := uint64(22)
	eventually(t, "restart detection", func() bool {
		if f.counter(f.mgr.metrics.restarts, "pod-a") > 0 {
			return true
		}
		p2.publish(t, next)
		next++
		return false
	})
	p2.publish(t, next)
	want := []uint64{20, 21}
	for h := uint64(22); h <= next; h++ {
		want = append(want, h)
	}
	f.waitHashes("pod-a", want...)
	if got := f.counter(f.mgr.metrics.restarts, "pod-a"); got != 1 {
		t.Errorf("restarts = %v, want 1", got)
	}
	if got := f.counter(f.mgr.metrics.reconnects, "pod-a"); got < 1 {
		t.Errorf("reconnects = %v, want >= 1", got)
	}
}

func TestSubscriberBoundedQueue(t *testing.T) {
	checkGoroutines(t)
	p := startPub(t, 0, 0, 100)
	cfg := testConfig()
	cfg.QueueSize = 1
	f := newFleet(t, cfg)
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // LIFO: before the fleet stops, even when the test fails
	f.idx.gate = gate
	f.follow("pod-a", p)
	eventually(t, "connection", func() bool { return f.connected("pod-a") })
	// The applier blocks on the first batch, the queue holds one more, and
	// the stream must drop the next live one rather than stop reading.
	var want []uint64
	eventually(t, "a queue drop", func() bool {
		want = append(want, uint64(100+len(want)))
		p.publish(t, want[len(want)-1])
		return f.counter(f.mgr.metrics.queueDrops, "pod-a") > 0
	})
	release() // the index catches up; replay fills what was dropped
	p.publish(t, 1)
	f.waitHashes("pod-a", append(want, 1)...)
}

func TestManagerRemoveAndReplace(t *testing.T) {
	checkGoroutines(t)
	p1, p2 := startPub(t, 0, 0, 100), startPub(t, 0, 0, 100)
	f := newFleet(t, testConfig())
	f.follow("pod-a", p1)
	f.follow("pod-a", p1) // idempotent
	p1.publish(t, 1)
	f.waitHashes("pod-a", 1)
	f.follow("pod-a", p2) // new address: remove + ensure
	p2.publish(t, 2)
	f.waitHashes("pod-a", 2)
	f.mgr.Remove("pod-a")
	f.mgr.Remove("pod-a") // idempotent
	eventually(t, "removal", func() bool { _, ok := f.idx.Pod("pod-a"); return !ok })
	eventually(t, "status", func() bool { return len(f.mgr.Status()) == 0 })
	if n := testutil.CollectAndCount(f.mgr.metrics.batches); n != 0 {
		t.Errorf("batches_total has %d series after removal, want 0", n)
	}
}

func TestManagerPodsInParallel(t *testing.T) {
	checkGoroutines(t)
	pa, pb := startPub(t, 0, 0, 100), startPub(t, 0, 0, 100)
	f := newFleet(t, testConfig())
	f.follow("pod-a", pa)
	f.follow("pod-b", pb)
	eventually(t, "connections", func() bool { return f.connected("pod-a") && f.connected("pod-b") })
	for i := range uint64(50) {
		pa.publish(t, 1000+i)
		pb.publish(t, 2000+i, 3000+i)
		pa.publish(t, 4000+i)
	}
	wantA, wantB := []uint64{}, []uint64{}
	for i := range uint64(50) {
		wantA = append(wantA, 1000+i, 4000+i)
		wantB = append(wantB, 2000+i, 3000+i)
	}
	f.waitHashes("pod-a", wantA...)
	f.waitHashes("pod-b", wantB...)
	if st := f.mgr.Status(); len(st) != 2 || st[0].Name != "pod-a" || st[1].Name != "pod-b" {
		t.Errorf("Status() = %+v, want pod-a and pod-b", st)
	}
}

func TestSubscriberDropsOversizeBatches(t *testing.T) {
	checkGoroutines(t)
	p := startPub(t, 0, 0, 100)
	cfg := testConfig()
	cfg.MaxMessageSize = 64
	f := newFleet(t, cfg)
	f.follow("pod-a", p)
	big := make([]uint64, 20)
	for i := range big {
		big[i] = 1<<60 + uint64(i) // 9 bytes each
	}
	p.publish(t, big...)
	p.publish(t, 7)
	f.waitHashes("pod-a", 7)
	if got := f.counter(f.mgr.metrics.oversize, "pod-a"); got < 1 {
		t.Errorf("oversize = %v, want >= 1", got)
	}
}
