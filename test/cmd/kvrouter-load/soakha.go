package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/toxiproxy"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
)

// haOptions shape a soak of two replicas: -pods pods behind toxiproxy,
// each with a /metrics page, churning its cache at batchesPerSec, a real
// redis-server behind toxiproxy, requests at -rates split between the
// replicas, a toxic on one dependency for 20 s of every cycle, and the
// second replica restarted midway.
type haOptions struct {
	d             time.Duration
	cycle         time.Duration
	batchesPerSec float64
	cacheBlocks   int
	bufferSteps   int
	sample        time.Duration
}

// haDecisionBound is the decisions' p99 the soak allows: a dependency on
// the request path (Redis) costs a decision at most its 250 ms deadline
// (docs/operations.md#faults-at-the-wire).
const haDecisionBound = time.Second

// haFault is one dependency's toxic in the cycle.
type haFault struct {
	name    string
	proxies func(h *haFleet) []*toxiproxy.Proxy
	toxics  []toxiproxy.Toxic
}

type haFleet struct {
	pubs                    []*vllmpub.Publisher
	caches                  []*podCache
	metrics, events, replay []*toxiproxy.Proxy
	redis                   *toxiproxy.Proxy
	args                    []string
}

func haFaults() []haFault {
	lat := func(ms int) toxiproxy.Toxic {
		return toxiproxy.Toxic{Type: "latency", Attributes: map[string]int{"latency": ms}}
	}
	stall := []toxiproxy.Toxic{
		{Type: "timeout", Stream: "downstream", Attributes: map[string]int{"timeout": 0}},
		{Type: "timeout", Stream: "upstream", Attributes: map[string]int{"timeout": 0}},
	}
	reset := toxiproxy.Toxic{Type: "reset_peer", Attributes: map[string]int{"timeout": 0}}
	drip := toxiproxy.Toxic{Type: "bandwidth", Attributes: map[string]int{"rate": 1}}
	metrics := func(h *haFleet) []*toxiproxy.Proxy { return h.metrics }
	events := func(h *haFleet) []*toxiproxy.Proxy { return h.events }
	replay := func(h *haFleet) []*toxiproxy.Proxy { return h.replay }
	redis := func(h *haFleet) []*toxiproxy.Proxy { return []*toxiproxy.Proxy{h.redis} }
	return []haFault{
		{"redis latency 8s", redis, []toxiproxy.Toxic{lat(8000)}},
		{"metrics stall", metrics, stall},
		{"events reset", events, []toxiproxy.Toxic{reset}},
		{"redis 1 KB/s", redis, []toxiproxy.Toxic{drip}},
		{"replay latency 8s", replay, []toxiproxy.Toxic{lat(8000)}},
		{"events stall", events, stall},
		{"metrics latency 8s", metrics, []toxiproxy.Toxic{lat(8000)}},
		{"redis reset", redis, []toxiproxy.Toxic{reset}},
	}
}

// soakHA runs the soak of two replicas and fails on any failed decision,
// a p99 over haDecisionBound, either replica's index differing from the
// pods' caches once the toxics are gone, or the first replica's live heap
// or goroutines growing.
func soakHA(ctx context.Context, o options, ho haOptions, stdout io.Writer) error {
	n := o.pods[0]
	bin := toxiproxy.Binary()
	if bin == "" {
		return errors.New("no toxiproxy-server: test/deps.sh toxiproxy builds it (make deps does)")
	}
	tp, err := toxiproxy.Start(bin)
	if err != nil {
		return err
	}
	defer tp.Close()
	redisAddr, stopRedis, err := startRedis()
	if err != nil {
		return err
	}
	defer stopRedis()
	pctx, cancelPubs := context.WithCancel(ctx)
	defer cancelPubs()
	h, err := newHAFleet(pctx, tp, n, redisAddr, ho)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "soak-ha: 2 replicas sharing Redis, %d pods × %.0f batches/s (%d-block caches, replay %d batches), %d requests/s, a toxic every %s, %s\n",
		n, ho.batchesPerSec, ho.cacheBlocks, ho.bufferSteps, o.rates[0], ho.cycle, ho.d)
	var replicas [2]atomic.Pointer[kvr]
	for i := range replicas {
		k := &kvr{pods: n}
		if err := k.launch(ctx, o, h.args); err != nil {
			k.stop()
			return fmt.Errorf("replica %d: %w", i, err)
		}
		replicas[i].Store(k)
	}
	defer func() {
		for i := range replicas {
			if k := replicas[i].Load(); k != nil {
				k.stop()
			}
		}
	}()

	soakCtx, cancel := context.WithTimeout(ctx, ho.d)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n+4)
	for i := range n {
		wg.Go(func() {
			so := soakOptions{batchesPerSec: ho.batchesPerSec, cacheBlocks: ho.cacheBlocks}
			if err := churn(soakCtx, h.pubs[i], uint64(i), h.caches[i], so, func() {}); err != nil && soakCtx.Err() == nil {
				errs <- fmt.Errorf("pod-%d: %w", i, err)
				cancel()
			}
		})
	}
	var lat []time.Duration
	var failed int
	var firstFailure string
	wg.Go(func() { lat, failed, firstFailure = driveHA(soakCtx, &replicas, o.rates[0]) })
	wg.Go(func() { cycleFaults(soakCtx, h, ho.cycle, stdout, errs) })
	var samples []soakSample
	t0 := time.Now()
	tick := time.NewTicker(ho.sample)
	defer tick.Stop()
	restarted := false
	for soakCtx.Err() == nil {
		select {
		case <-soakCtx.Done():
		case <-tick.C:
			if !restarted && time.Since(t0) >= ho.d/2 {
				restarted = true
				if err := restart(ctx, o, h, &replicas[1], stdout); err != nil {
					errs <- err
					cancel()
				}
			}
			a := replicas[0].Load()
			s := soakSample{
				at: time.Since(t0).Round(time.Second), rssKB: rss(a.cmd.Process.Pid, "VmRSS:"), heap: a.liveHeap(),
				goroutines: int(a.metric("go_goroutines")), entries: a.entries(), homes: int(a.metric("kvrouter_router_homed_prefixes")),
				prefixBytes: a.metric("kvrouter_tokenizer_prefix_cache_bytes"), prefixBudget: a.metric("kvrouter_tokenizer_prefix_cache_budget_bytes"),
			}
			samples = append(samples, s)
			b := replicas[1].Load()
			fmt.Fprintf(stdout, "  %6s replica 0: live_heap=%d MiB goroutines=%d entries=%d leases=%.0f | replica 1: entries=%d leases=%.0f redis_up=%.0f/%.0f\n",
				s.at, s.heap>>20, s.goroutines, s.entries, a.metric("kvrouter_index_redis_leases"), b.entries(), b.metric("kvrouter_index_redis_leases"),
				a.metric("kvrouter_index_redis_up"), b.metric("kvrouter_index_redis_up"))
		}
	}
	wg.Wait()
	close(errs)
	var problems []error
	for err := range errs {
		problems = append(problems, err)
	}
	for _, p := range slices.Concat(h.metrics, h.events, h.replay, []*toxiproxy.Proxy{h.redis}) {
		if err := p.Clear(); err != nil {
			problems = append(problems, err)
		}
	}
	for i := range replicas {
		if err := awaitCaches(ctx, replicas[i].Load(), h.caches); err != nil {
			problems = append(problems, fmt.Errorf("replica %d: %w", i, err))
		}
	}
	if failed > 0 {
		problems = append(problems, fmt.Errorf("%d of %d decisions failed, the first: %s", failed, len(lat)+failed, firstFailure))
	}
	slices.Sort(lat)
	if p99 := quantile(lat, 0.99); p99 > haDecisionBound {
		problems = append(problems, fmt.Errorf("decision p99 %s over its bound %s", ms(p99), ms(haDecisionBound)))
	}
	// The run may end with a toxic on: goroutines waiting on a stalled
	// wire are not a leak. Growth is judged once the replica shows no
	// fault, on one more sample.
	a := replicas[0].Load()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if a.metric("kvrouter_router_metrics_failing_pods") == 0 && a.metric("kvrouter_kvevents_connected") == float64(n) && a.metric("kvrouter_index_redis_up") == 1 {
			break
		}
	}
	samples = append(samples, soakSample{
		at: time.Since(t0).Round(time.Second), heap: a.liveHeap(), goroutines: int(a.metric("go_goroutines")),
		entries: a.entries(), homes: int(a.metric("kvrouter_router_homed_prefixes")),
		prefixBytes: a.metric("kvrouter_tokenizer_prefix_cache_bytes"), prefixBudget: a.metric("kvrouter_tokenizer_prefix_cache_budget_bytes"),
	})
	growth, note := checkGrowth(samples)
	problems = append(problems, growth...)
	if note != "" {
		fmt.Fprintln(stdout, "soak-ha: "+note)
	}
	fmt.Fprintf(stdout, "soak-ha: %d decisions (%d failed, latency p50 %s, p99 %s, max %s); replica 0 live heap %d → %d MiB, goroutines %d → %d\n",
		len(lat), failed, ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1)),
		samples[0].heap>>20, samples[len(samples)-1].heap>>20, samples[0].goroutines, samples[len(samples)-1].goroutines)
	return errors.Join(problems...)
}

// newHAFleet starts n publishers and /metrics pages, and a proxy for each
// of their sockets and for Redis.
func newHAFleet(ctx context.Context, tp *toxiproxy.Server, n int, redisAddr string, ho haOptions) (*haFleet, error) {
	h := &haFleet{}
	var errs []error
	proxy := func(name, upstream string) *toxiproxy.Proxy {
		p, perr := tp.Proxy(name, upstream)
		if perr != nil {
			errs = append(errs, perr)
			return &toxiproxy.Proxy{}
		}
		return p
	}
	h.redis = proxy("redis", redisAddr)
	h.args = []string{"--index-backend", "redis", "--index-redis-addr", h.redis.Addr, "--drain-delay", "0s"}
	page := []byte("vllm:num_requests_waiting 0\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n")
	for i := range n {
		cfg := publisherConfig()
		cfg.BufferSteps = ho.bufferSteps
		p, err := vllmpub.New(cfg)
		if err != nil {
			return nil, err
		}
		go func() { _ = p.Run(ctx) }()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(page) }), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
		h.pubs, h.caches = append(h.pubs, p), append(h.caches, &podCache{})
		name := "pod-" + strconv.Itoa(i)
		m, e, r := proxy(name+"-http", ln.Addr().String()), proxy(name+"-events", "127.0.0.1:"+portOf(p.Endpoint())), proxy(name+"-replay", "127.0.0.1:"+portOf(p.ReplayEndpoint()))
		h.metrics, h.events, h.replay = append(h.metrics, m), append(h.events, e), append(h.replay, r)
		h.args = append(h.args, "--pod", fmt.Sprintf("%s=%s,model=qwen3,events=%d,replay=%d", name, m.Addr, e.Port(), r.Port()))
	}
	return h, errors.Join(errs...)
}

// startRedis runs a private redis-server without persistence.
func startRedis() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "kvrouter-soak-redis-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("redis-server (test/deps.sh system installs it): %w", err)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, derr := net.Dial("tcp", addr); derr == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return "", nil, errors.New("redis-server never listened")
		}
	}
	return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }, nil
}

// driveHA sends mixedRequests at rate per second, in turn to each replica
// that is up (a gateway routes around one that is restarting), and
// returns the decisions' latencies and the failures.
func driveHA(ctx context.Context, replicas *[2]atomic.Pointer[kvr], rate int) (lat []time.Duration, failed int, first string) {
	reqs := mixedRequests()
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return lat, failed, first
		case <-tick.C:
		}
		k := replicas[i%2].Load()
		if k == nil || k.client == nil {
			k = replicas[(i+1)%2].Load()
		}
		wg.Go(func() {
			start := time.Now()
			res, err := k.client.Do(context.WithoutCancel(ctx), reqs[i%len(reqs)])
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failed++
				first = cmpOr(first, err.Error())
			case res.Status != 200:
				failed++
				first = cmpOr(first, fmt.Sprintf("status %d %s", res.Status, res.Details))
			default:
				lat = append(lat, d)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// cycleFaults puts haFaults in turn on the wire, for 20 s of every cycle.
func cycleFaults(ctx context.Context, h *haFleet, cycle time.Duration, stdout io.Writer, errs chan<- error) {
	faults := haFaults()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(cycle - 20*time.Second):
		}
		f := faults[i%len(faults)]
		fmt.Fprintf(stdout, "soak-ha: toxic on %s for 20 s\n", f.name)
		proxies := f.proxies(h)
		for _, p := range proxies {
			for _, x := range f.toxics {
				if err := p.Add(x); err != nil {
					errs <- err
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
		}
		for _, p := range proxies {
			if err := p.Clear(); err != nil {
				errs <- err
				return
			}
		}
	}
}

// restart stops the replica (out of the requests' rotation first, then
// SIGTERM, which hands its leases over) and starts a new one in its place.
func restart(ctx context.Context, o options, h *haFleet, slot *atomic.Pointer[kvr], stdout io.Writer) error {
	old := slot.Load()
	slot.Store(&kvr{}) // no client: requests go to the other replica
	time.Sleep(time.Second)
	old.stop()
	fmt.Fprintln(stdout, "soak-ha: replica 1 stopped (SIGTERM); starting it again")
	k := &kvr{pods: len(h.pubs)}
	if err := k.launch(ctx, o, h.args); err != nil {
		k.stop()
		return fmt.Errorf("restarting replica 1: %w", err)
	}
	slot.Store(k)
	return nil
}

// awaitCaches waits until k's index holds, per pod, as many entries as
// the pod's cache holds blocks.
func awaitCaches(ctx context.Context, k *kvr, caches []*podCache) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		errs := k.compare(caches)
		if len(errs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("index still differs from the pods' caches 2 minutes after the toxics: %w (and %d more)", errs[0], len(errs)-1)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
