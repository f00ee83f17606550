package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/router"
)

// TestE2ERollingRestart: two kvrouter processes share the index through a
// real redis-server while requests flow through both and two pods store
// and evict blocks; the pods keep 4 batches for replay, so what they
// stored earlier lives only in Redis. Each replica in turn is replaced as
// a rolling update does: a new process started beside it (its own view
// empty), then the old one stopped with SIGTERM, requests moving to the
// replicas that run. After each step, and at the end, every running
// replica matches every topic's blocks on each pod exactly as the pods
// hold them (the fleet's own index, following the pods directly, is the
// model), and no request failed.
func TestE2ERollingRestart(t *testing.T) {
	slowE2E(t)
	bin := buildKVRouter(t)
	srv := redisserver.New(t)
	f := startFleetWith(t, fleetOptions{pods: 2, publisher: func(_ int, c *vllmpub.Config) { c.BufferSteps = 4 }})
	args := []string{"--model", "qwen3=" + qwen3Dir(t), "--index-backend", "redis", "--index-redis-addr", srv.Addr, "--drain-delay", "0s"}
	for _, name := range []string{"sim-0", "sim-1"} {
		sim := f.sims[name]
		args = append(args, "--pod", fmt.Sprintf("%s=%s,model=qwen3,events=%d,replay=%d", name, f.pods[name],
			port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint())))
	}
	var replicas [2]atomic.Pointer[kvrouterProcess]
	for i := range replicas {
		replicas[i].Store(startKVRouter(t, bin, args...))
	}
	leases := func() float64 {
		return replicas[0].Load().gauge(t, "kvrouter_index_redis_leases") + replicas[1].Load().gauge(t, "kvrouter_index_redis_leases")
	}
	if !poll(func() bool { return replicas[0].Load().ready(t) && replicas[1].Load().ready(t) && leases() == 2 }) {
		t.Fatal("the replicas never became ready with both pods' leases held")
	}

	var mu sync.Mutex
	var gate sync.RWMutex // held by the checks: no request in flight
	var failures []string
	ctx, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	t.Cleanup(func() { stop(); done.Wait() })
	done.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			kv := replicas[i%2].Load()
			if kv == nil {
				kv = replicas[(i+1)%2].Load()
			}
			gate.RLock()
			_, err := route(ctx, kv.envoy, prompt(restartTopics[i%len(restartTopics)], fmt.Sprintf("Question %d?", i)))
			gate.RUnlock()
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	exact := func(step string) {
		t.Helper()
		gate.Lock()
		defer gate.Unlock()
		var why string
		if !poll(func() bool {
			for i := range replicas {
				kv := replicas[i].Load()
				for _, topic := range restartTopics {
					body := prompt(topic, "One more question?")
					want, err := f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(body)})
					if err != nil {
						t.Fatal(err)
					}
					_, matched := kv.score(t, body)
					for _, s := range want.Pods {
						if matched[s.Pod] != s.Matched {
							why = fmt.Sprintf("replica %d: %s on %s: %d blocks matched, the pod holds %d", i, topic, s.Pod, matched[s.Pod], s.Matched)
							return false
						}
					}
				}
			}
			return true
		}) {
			t.Fatalf("%s: %s", step, why)
		}
	}
	time.Sleep(2 * time.Second) // the pods store far past their replay buffers
	exact("before the update")
	for i := range replicas {
		next := startKVRouter(t, bin, args...)
		if !poll(func() bool { return next.ready(t) }) {
			t.Fatalf("the replica replacing %d never became ready", i)
		}
		time.Sleep(6 * time.Second) // it follows the pods for a lease's life, as a readiness delay would have it
		old := replicas[i].Swap(next)
		if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		_ = old.cmd.Wait()
		if !poll(func() bool { return leases() == 2 }) {
			t.Fatalf("after replacing replica %d the leases held are %v, want 2", i, leases())
		}
		time.Sleep(time.Second) // the new holder writes some of the pods' events
		exact(fmt.Sprintf("after replacing replica %d", i))
	}
	stop()
	done.Wait()
	for _, f := range failures {
		t.Errorf("failed: %s", f)
	}
}
