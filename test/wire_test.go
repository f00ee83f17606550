package test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/internal/fixture/toxiproxy"
	"github.com/kvrouter/kvrouter/router"
)

// decisionBound is the decision latency p99 a fault in a dependency must
// not push a decision past, in these tests: the one dependency on the
// request path, Redis, is given index.redis.timeout (250 ms) per round trip
// before the replica answers from its own view, and the toxics hold the
// wire for 8 s or for ever. docs/operations.md#faults-at-the-wire.
const decisionBound = time.Second

// wireRig is the real kvrouter binary following two simulated pods and a
// real redis-server, each connection through toxiproxy: every pod's HTTP
// port (its /metrics scrapes and the proxy front end's requests), its event
// and its replay socket, and Redis. A workload runs through ext_proc and the
// OpenAI proxy all along.
type wireRig struct {
	f      *fleet
	kv     *kvrouterProcess
	http   map[string]*toxiproxy.Proxy // by pod
	events map[string]*toxiproxy.Proxy
	replay map[string]*toxiproxy.Proxy
	redis  []*toxiproxy.Proxy // one per server: a standalone one, or each node of a cluster
	real   map[string]string  // a pod's proxied address → its own
	load   *workload
	base   float64 // a counter's value when a case started
}

// startWireRig starts the rig with a standalone redis-server, or with a
// Redis Cluster of three masters, each announcing its proxy's port so that
// the cluster's redirections go through the proxies too.
func startWireRig(t *testing.T, cluster bool) *wireRig {
	t.Helper()
	tp := toxiproxy.New(t)
	bin := buildKVRouter(t)
	var servers []*redisserver.Server
	if cluster {
		servers = redisserver.NewCluster(t, 3)
	} else {
		servers = []*redisserver.Server{redisserver.New(t)}
	}
	f := startFleetWith(t, fleetOptions{pods: 2}) // the pods; its router is the model the process is checked against
	r := &wireRig{f: f, http: map[string]*toxiproxy.Proxy{}, events: map[string]*toxiproxy.Proxy{}, replay: map[string]*toxiproxy.Proxy{}, real: map[string]string{}}
	proxy := func(name, upstream string) *toxiproxy.Proxy {
		p, err := tp.Proxy(name, upstream)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var addrs []string
	for i, srv := range servers {
		p := proxy(fmt.Sprintf("redis-%d", i), srv.Addr)
		if cluster {
			srv.Announce(t, p.Port())
		}
		r.redis, addrs = append(r.redis, p), append(addrs, p.Addr)
	}
	args := []string{
		"--model", "qwen3=" + qwen3Dir(t), "--index-backend", "redis", "--index-redis-addr", strings.Join(addrs, ","),
		"--http-addr", "127.0.0.1:0", "--drain-delay", "0s",
	}
	if cluster {
		args = append(args, "--index-redis-cluster")
	}
	for _, name := range []string{"sim-0", "sim-1"} {
		sim := f.sims[name]
		r.http[name] = proxy(name+"-http", f.pods[name])
		r.events[name] = proxy(name+"-events", fmt.Sprintf("127.0.0.1:%d", port(t, sim.Publisher().Endpoint())))
		r.replay[name] = proxy(name+"-replay", fmt.Sprintf("127.0.0.1:%d", port(t, sim.Publisher().ReplayEndpoint())))
		r.real[r.http[name].Addr] = f.pods[name]
		args = append(args, "--pod", fmt.Sprintf("%s=%s,model=qwen3,events=%d,replay=%d", name, r.http[name].Addr, r.events[name].Port(), r.replay[name].Port()))
	}
	r.kv = startKVRouter(t, bin, args...)
	if !poll(func() bool { return r.kv.ready(t) && r.kv.gauge(t, "kvrouter_index_redis_leases") == 2 }) {
		t.Fatal("kvrouter never became ready and the writer of both pods")
	}
	r.load = r.startWorkload(t)
	return r
}

// workload sends prompts of restartTopics in turn through ext_proc (then
// on to the pod, as the proxy would) and through kvrouter's OpenAI proxy,
// one at a time on each path, and records every failure and every
// ext_proc decision's latency.
type workload struct {
	mu        sync.Mutex
	failures  []string
	latencies []time.Duration
	sent      atomic.Int64
	// direct stops the proxy front end's requests: they cross the wire to
	// the pod that a case cuts, and fail for the pod's sake.
	direct atomic.Bool
	gate   sync.RWMutex // held by pause
}

func (r *wireRig) startWorkload(t *testing.T) *workload {
	w := &workload{}
	ctx, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	t.Cleanup(func() { stop(); done.Wait() })
	client := &http.Client{Timeout: time.Minute}
	loop := func(path string, send func(int) error) {
		done.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				w.gate.RLock()
				if path == "proxy" && w.direct.Load() { // read under the gate: see setDirect
					w.gate.RUnlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				err := send(i)
				w.gate.RUnlock()
				if err != nil && ctx.Err() == nil {
					w.fail(fmt.Sprintf("%s request %d: %v", path, i, err))
				}
				w.sent.Add(1)
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	loop("ext_proc", func(i int) error {
		body := prompt(restartTopics[i%len(restartTopics)], fmt.Sprintf("Question %d by ext_proc?", i))
		start := time.Now()
		res, err := r.kv.envoy.Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{100}})
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.latencies = append(w.latencies, time.Since(start))
		w.mu.Unlock()
		if res.Status != 200 {
			return fmt.Errorf("routing = %d %s", res.Status, res.Details)
		}
		return postTo(client, r.real[res.Destination], res.UpstreamBody)
	})
	loop("proxy", func(i int) error {
		body := prompt(restartTopics[(i+3)%len(restartTopics)], fmt.Sprintf("Question %d by the proxy?", i))
		return postTo(client, r.kv.proxy, []byte(body))
	})
	return w
}

func postTo(client *http.Client, addr string, body []byte) error {
	resp, err := client.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	return nil
}

func (w *workload) fail(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, msg)
}

// mark starts a new count of failures and latencies.
func (w *workload) mark() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures, w.latencies = nil, nil
}

// results returns the failures and the decisions' p99 since mark.
func (w *workload) results() (failures []string, decisions int, p99 time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.failures), len(w.latencies), p99Of(w.latencies)
}

// decisionLoop sends body(i) through kv's ext_proc every 20 ms until ctx
// is done, and records each failure and each decision's latency.
type decisionLoop struct {
	mu        sync.Mutex
	failures  []string
	latencies []time.Duration
}

func (l *decisionLoop) run(ctx context.Context, kv *kvrouterProcess, body func(int) string) {
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		res, err := kv.envoy.Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: []byte(body(i)), Chunks: []int{100}})
		d := time.Since(start)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			l.fail(err.Error())
		case res.Status != 200:
			l.fail(fmt.Sprintf("routing = %d %s", res.Status, res.Details))
		default:
			l.mu.Lock()
			l.latencies = append(l.latencies, d)
			l.mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *decisionLoop) fail(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, msg)
}

// take returns the failures and latencies recorded since the last take.
func (l *decisionLoop) take() (failures []string, latencies []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	failures, latencies = l.failures, l.latencies
	l.failures, l.latencies = nil, nil
	return failures, latencies
}

// p99Of is the 99th percentile of l (0 for none).
func p99Of(l []time.Duration) time.Duration {
	if len(l) == 0 {
		return 0
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return l[min(len(l)-1, len(l)*99/100)]
}

// setDirect turns the proxy front end's requests off (or on again) once
// those in flight are done, so that none is on the wire a case cuts.
func (w *workload) setDirect(on bool) {
	w.pause()
	w.direct.Store(on)
	w.resume()
}

// pause waits for the requests in flight and holds the next ones until
// resume.
func (w *workload) pause()  { w.gate.Lock() }
func (w *workload) resume() { w.gate.Unlock() }

// sum adds up the process's series of name whose labels include every
// key="value" of labels; -1 when there is none.
func (p *kvrouterProcess) sum(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp := p.adminDo(t, http.MethodGet, "/metrics", nil)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	total, found := 0.0, false
series:
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !strings.Contains(rest, k+`="`+v+`"`) {
				continue series
			}
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		total, found = total+v, true
	}
	if !found {
		return -1
	}
	return total
}

// awaitExact waits, with the workload paused, until the process's index
// holds exactly what the pods cache: per pod as many entries as blocks,
// and for every topic the blocks the fleet's own index (following the pods
// without a proxy) matches on each pod, read through Redis.
func (r *wireRig) awaitExact(t *testing.T) {
	t.Helper()
	r.load.pause()
	defer r.load.resume()
	var why string
	exact := func() bool {
		got := r.kv.podEntries(t)
		for name, sim := range r.f.sims {
			if n := len(sim.Cached()); got[name] != n {
				why = fmt.Sprintf("%s: %d index entries, the pod caches %d blocks", name, got[name], n)
				return false
			}
		}
		for _, topic := range restartTopics {
			body := prompt(topic, "One more question?")
			want, err := r.f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			_, matched := r.kv.score(t, body)
			for _, s := range want.Pods {
				if matched[s.Pod] != s.Matched {
					why = fmt.Sprintf("%s on %s: %d blocks matched, the pod holds %d", topic, s.Pod, matched[s.Pod], s.Matched)
					return false
				}
			}
		}
		return true
	}
	if !poll(exact) {
		t.Fatalf("the index never came back to the pods' caches: %s", why)
	}
}

// wireFault is one case of the fault matrix: toxics on some of the rig's
// proxies while the workload runs.
type wireFault struct {
	name    string
	proxies func(r *wireRig) []*toxiproxy.Proxy
	toxics  []toxiproxy.Toxic
	// visible holds once kvrouter shows the fault (a metric, /readyz); it
	// is polled while the toxics are on. shows names what it looks for.
	visible func(t *testing.T, r *wireRig) bool
	shows   string
	// recovered holds once kvrouter no longer shows the fault.
	recovered func(t *testing.T, r *wireRig) bool
	// start, when set, runs once the toxics are on.
	start func(t *testing.T, r *wireRig)
	// podWire: the toxics are on the pods' HTTP port, which the proxy
	// front end forwards requests over (Envoy's path to the pod is its
	// own): only ext_proc's requests run.
	podWire bool
}

func podsOf(m map[string]*toxiproxy.Proxy) func(*wireRig) []*toxiproxy.Proxy {
	return func(*wireRig) []*toxiproxy.Proxy { return []*toxiproxy.Proxy{m["sim-0"], m["sim-1"]} }
}

func latency(ms int) toxiproxy.Toxic {
	return toxiproxy.Toxic{Type: "latency", Attributes: map[string]int{"latency": ms}}
}

// stall drops everything both ways without closing the connection (it is
// closed when the toxic is removed).
func stall() []toxiproxy.Toxic {
	return []toxiproxy.Toxic{
		{Type: "timeout", Stream: "downstream", Attributes: map[string]int{"timeout": 0}},
		{Type: "timeout", Stream: "upstream", Attributes: map[string]int{"timeout": 0}},
	}
}

func resetPeer() toxiproxy.Toxic {
	return toxiproxy.Toxic{Type: "reset_peer", Attributes: map[string]int{"timeout": 0}}
}

func drip(kbPerSecond int) toxiproxy.Toxic {
	return toxiproxy.Toxic{Type: "bandwidth", Attributes: map[string]int{"rate": kbPerSecond}}
}

func slicer() toxiproxy.Toxic {
	return toxiproxy.Toxic{Type: "slicer", Attributes: map[string]int{"average_size": 3, "size_variation": 2, "delay": 200}}
}

func limitData(bytes int) toxiproxy.Toxic {
	return toxiproxy.Toxic{Type: "limit_data", Attributes: map[string]int{"bytes": bytes}}
}

func slowClose(ms int) toxiproxy.Toxic {
	return toxiproxy.Toxic{Type: "slow_close", Attributes: map[string]int{"delay": ms}}
}

// scrapesFailing: the pods' /metrics scrapes fail.
func scrapesFailing(t *testing.T, r *wireRig) bool {
	return r.kv.gauge(t, "kvrouter_router_metrics_failing_pods") >= 1
}

func scrapesOK(t *testing.T, r *wireRig) bool {
	return r.kv.gauge(t, "kvrouter_router_metrics_failing_pods") == 0
}

// eventsDown: a pod's event subscriber is not connected.
func eventsDown(t *testing.T, r *wireRig) bool {
	return r.kv.sum(t, "kvrouter_kvevents_connected") < 2
}

func eventsUp(t *testing.T, r *wireRig) bool {
	return r.kv.sum(t, "kvrouter_kvevents_connected") == 2
}

func redisDown(t *testing.T, r *wireRig) bool {
	return r.kv.gauge(t, "kvrouter_index_redis_up") == 0 && strings.Contains(r.kv.readyz(t), "Redis is unreachable")
}

func redisUp(t *testing.T, r *wireRig) bool {
	return r.kv.gauge(t, "kvrouter_index_redis_up") == 1 && r.kv.gauge(t, "kvrouter_index_redis_leases") == 2
}

func wireFaults() []wireFault {
	metrics := func(name string, toxics ...toxiproxy.Toxic) wireFault {
		return wireFault{
			name: "metrics/" + name, proxies: func(r *wireRig) []*toxiproxy.Proxy { return podsOf(r.http)(r) }, toxics: toxics,
			visible: scrapesFailing, shows: "kvrouter_router_metrics_failing_pods >= 1", recovered: scrapesOK, podWire: true,
		}
	}
	events := func(name string, toxics ...toxiproxy.Toxic) wireFault {
		return wireFault{
			name: "events/" + name, proxies: func(r *wireRig) []*toxiproxy.Proxy { return podsOf(r.events)(r) }, toxics: toxics,
			visible: eventsDown, shows: "kvrouter_kvevents_connected 0", recovered: eventsUp,
		}
	}
	redis := func(name string, toxics ...toxiproxy.Toxic) wireFault {
		return wireFault{
			name: "redis/" + name, proxies: func(r *wireRig) []*toxiproxy.Proxy { return r.redis }, toxics: toxics,
			visible: redisDown, shows: "kvrouter_index_redis_up 0 and redis on /readyz", recovered: redisUp,
		}
	}
	// A replay case cuts the event connections once the toxics are on the
	// replay sockets: the subscribers reconnect, miss the batches sent
	// meanwhile, and must replay them through the faulty wire.
	replay := func(name string, toxics ...toxiproxy.Toxic) wireFault {
		return wireFault{
			name: "replay/" + name, proxies: func(r *wireRig) []*toxiproxy.Proxy { return podsOf(r.replay)(r) }, toxics: toxics,
			start: func(t *testing.T, r *wireRig) {
				r.base = r.kv.sum(t, "kvrouter_kvevents_replays_total", "result=failed")
				for _, p := range podsOf(r.events)(r) {
					if err := p.SetEnabled(false); err != nil {
						t.Fatal(err)
					}
				}
				r.f.post(t, "sim-0", prompt("lagoons", "Missed while cut off?"))
				r.f.post(t, "sim-1", prompt("fjords", "Missed while cut off?"))
				for _, p := range podsOf(r.events)(r) {
					if err := p.SetEnabled(true); err != nil {
						t.Fatal(err)
					}
				}
			},
			visible: func(t *testing.T, r *wireRig) bool {
				return r.kv.sum(t, "kvrouter_kvevents_replays_total", "result=failed") > r.base
			},
			shows: "kvrouter_kvevents_replays_total{result=\"failed\"} growing", recovered: eventsUp,
		}
	}
	// Some faults only slow or slice the stream: nothing shows, nothing
	// may break.
	quiet := func(c wireFault) wireFault { c.visible = nil; return c }
	return []wireFault{
		metrics("latency", latency(8000)),
		metrics("stall", stall()...),
		metrics("reset", resetPeer()),
		metrics("truncated", limitData(300)),
		events("stall", stall()...),
		events("reset", resetPeer()),
		events("truncated", limitData(2000)),
		quiet(events("latency", latency(1500))),
		quiet(events("sliced", slicer())),
		quiet(events("slow-close", slowClose(3000))),
		replay("stall", stall()...),
		replay("reset", resetPeer()),
		replay("latency", latency(8000)),
		redis("latency", latency(8000)),
		redis("stall", stall()...),
		redis("drip", drip(1)),
		redis("reset", resetPeer()),
		redis("truncated", limitData(5000)),
	}
}

// TestWireFaults is the fault matrix: each case puts toxics on the wire to
// one dependency while requests flow through ext_proc and the proxy and
// the pods' events flow. No request fails; the decisions' p99 stays under
// decisionBound; kvrouter shows the fault and logs at most a few WARN lines
// for it; once the toxics are gone it recovers by itself and its index
// equals the pods' caches.
func TestWireFaults(t *testing.T) {
	runWireFaults(t, startWireRig(t, false), wireFaults())
}

// TestWireFaultsRedisCluster runs the Redis cases against a Redis Cluster
// of three masters, each node behind its own proxy and every node faulted
// at once.
func TestWireFaultsRedisCluster(t *testing.T) {
	var cases []wireFault
	for _, c := range wireFaults() {
		if strings.HasPrefix(c.name, "redis/") {
			cases = append(cases, c)
		}
	}
	runWireFaults(t, startWireRig(t, true), cases)
}

func runWireFaults(t *testing.T, r *wireRig, cases []wireFault) {
	if !poll(func() bool { return r.load.sent.Load() >= 20 }) {
		t.Fatal("the workload never got going")
	}
	r.awaitExact(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			warnMark := r.kv.warns.count()
			r.load.mark()
			sent := r.load.sent.Load()
			proxies := c.proxies(r)
			r.load.setDirect(c.podWire)
			defer r.load.setDirect(false)
			for _, p := range proxies {
				for _, x := range c.toxics {
					if err := p.Add(x); err != nil {
						t.Fatal(err)
					}
				}
			}
			if c.start != nil {
				c.start(t, r)
			}
			seen := c.visible == nil || pollFor(30*time.Second, func() bool { return c.visible(t, r) })
			time.Sleep(2 * time.Second) // the fault goes on a while after it shows
			for _, p := range proxies {
				if err := p.Clear(); err != nil {
					t.Fatal(err)
				}
			}
			if !seen {
				t.Errorf("the fault never showed: want %s", c.shows)
			}
			if !pollFor(30*time.Second, func() bool { return c.recovered(t, r) }) {
				t.Errorf("kvrouter still shows the fault 30 s after the toxics were removed")
			}
			r.awaitExact(t)
			failures, decisions, p99 := r.load.results()
			warns := r.kv.warns.faultWarns(warnMark)
			t.Logf("%d requests, %d decisions by ext_proc, p99 %v, %d WARN lines", r.load.sent.Load()-sent, decisions, p99, len(warns))
			for _, f := range failures {
				t.Errorf("failed: %s", f)
			}
			if p99 > decisionBound {
				t.Errorf("decision p99 %v, want <= %v", p99, decisionBound)
			}
			if most := 2*len(proxies) + 2; len(warns) > most {
				t.Errorf("%d WARN lines for one fault, want <= %d:\n%s", len(warns), most, strings.Join(warns, "\n"))
			}
		})
	}
}

// pollFor is poll with another deadline.
func pollFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
