package kvevents

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
)

// checkGoroutines fails t if, once t's cleanups have run, more goroutines
// are alive than when it was called; it waits up to 20 s for them to exit (a loaded host is slow to end them).
// Call it first, so its cleanup runs last.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(20 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			runtime.Gosched()
			time.Sleep(5 * time.Millisecond) // a leak check has nothing to wait on
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines leaked (%d before, %d after):\n%s", n-before, before, n, buf)
		}
	})
}

// eventually polls cond until it holds or 10s pass; only for conditions
// that depend on real sockets.
func eventually(t *testing.T, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, d := range detail {
				what += ": " + d()
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a socket-driven condition
	}
}

// recIndex is a kvindex.Index that also records each pod's live hashes,
// and can hold writes back (gate) to play a slow index.
type recIndex struct {
	*kvindex.Index
	gate chan struct{} // nil: never blocks; else each Stored takes a token
	mu   sync.Mutex
	live map[kvindex.PodID]map[uint64]int
}

func newRecIndex(t *testing.T) *recIndex {
	t.Helper()
	idx, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &recIndex{Index: idx, live: map[kvindex.PodID]map[uint64]int{}}
}

func (r *recIndex) Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	if r.gate != nil {
		<-r.gate
	}
	if err := r.Index.Stored(pod, tier, hashes); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[pod] == nil {
		r.live[pod] = map[uint64]int{}
	}
	for _, h := range hashes {
		r.live[pod][h]++
	}
	return nil
}

func (r *recIndex) Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error {
	if err := r.Index.Removed(pod, tier, hashes); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	live := r.live[pod] // nil once cleared: a removal of what it no longer holds
	for _, h := range hashes {
		if _, ok := live[h]; !ok {
			continue
		}
		if live[h]--; live[h] <= 0 {
			delete(live, h)
		}
	}
	return nil
}

func (r *recIndex) ClearPod(pod kvindex.PodID) error {
	if err := r.Index.ClearPod(pod); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, pod)
	return nil
}

func (r *recIndex) RemovePod(pod kvindex.PodID) error {
	if err := r.Index.RemovePod(pod); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, pod)
	return nil
}

// hashes returns the named pod's live hashes.
func (r *recIndex) hashes(name string) map[uint64]int {
	id, ok := r.Pod(name)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.live[id])
}

// testLogger discards logs unless -v.
func testLogger(t *testing.T) *slog.Logger {
	if t != nil && testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// runBackground runs fn until the test ends, then cancels it and waits.
func runBackground(t *testing.T, fn func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}

// u32s returns the n token ids lo, lo+1, ….
func u32s(lo, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(lo + i)
	}
	return out
}

// opReader returns the next byte of ops at each call, 0 once none is left:
// the fuzz targets read their operations with it.
func opReader(ops *[]byte) func() byte {
	return func() byte {
		if len(*ops) == 0 {
			return 0
		}
		b := (*ops)[0]
		*ops = (*ops)[1:]
		return b
	}
}
