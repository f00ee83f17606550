package test

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/fixture/toxiproxy"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvindex"
)

// fastEvents makes subscribers notice a lost connection and come back
// within milliseconds instead of the production seconds.
func fastEvents(c *kvevents.Config) {
	c.BackoffMin, c.BackoffMax = 10*time.Millisecond, 100*time.Millisecond
	c.PollInterval = 20 * time.Millisecond
	c.ReplayTimeout = 20 * time.Second // a bound on a replay that never ends; a loaded host is slow, not lost
}

// prompt is a completion body whose first blocks are shared by every
// prompt of the same topic.
func prompt(topic, question string) string {
	return fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, strings.Repeat("Background on "+topic+" that every follow-up repeats verbatim. ", 10)+question)
}

// post sends body straight to pod, bypassing the router, as a client that
// knows the pod would: its cache changes without kvrouter routing anything.
func (f *fleet) post(t *testing.T, pod, body string) {
	t.Helper()
	resp, err := http.Post("http://"+f.pods[pod]+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pod %s answered %s", pod, resp.Status)
	}
}

// dropSpeculation moves the index's clock past the speculative TTL and
// sweeps, so only entries the pods' own events put there remain.
func (f *fleet) dropSpeculation() {
	f.skew.Add(int64(kvindex.DefaultConfig().SpeculativeTTL + time.Second))
	f.index.Sweep()
}

// indexed returns which of want the index holds for pod for real (not
// speculatively), and how many entries it holds for the pod in all.
func (f *fleet) indexed(pod string, want []uint64) (held []uint64, entries int) {
	id, ok := f.index.Pod(pod)
	if !ok {
		return nil, 0
	}
	var out []kvindex.PodMatch
	for _, h := range want {
		out = f.index.Match("qwen3", []uint64{h}, []kvindex.PodID{id}, out)
		if out[0].Tiers[kvindex.TierGPU] == 1 {
			held = append(held, h)
		}
	}
	return held, f.index.PodEntries(id)
}

// awaitExact waits until the index holds exactly the blocks truth() says
// the pod caches: every one of them, and nothing else.
func (f *fleet) awaitExact(t *testing.T, pod string, truth func() []uint64) {
	t.Helper()
	f.dropSpeculation()
	var want, held []uint64
	var entries int
	ok := poll(func() bool {
		want = truth()
		held, entries = f.indexed(pod, want)
		return len(want) > 0 && len(held) == len(want) && entries == len(want)
	})
	if !ok {
		t.Fatalf("index of %s: %d of the pod's %d cached blocks held, %d entries in all; want exactly the pod's blocks", pod, len(held), len(want), entries)
	}
}

// poll calls cond until it holds or a deadline passes: real sockets and
// processes are involved, so there is nothing to wait on but the result.
func poll(cond func() bool) bool {
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// metric returns the value of the kvrouter_kvevents_<name> series of pod
// whose other labels are those of kv (0 when absent).
func metric(t *testing.T, reg *prometheus.Registry, name, pod string, kv ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pod": pod}
	for i := 0; i+1 < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_kvevents_"+name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// awaitMetric waits until the series reaches at least min.
func (f *fleet) awaitMetric(t *testing.T, name, pod string, minimum float64, kv ...string) {
	t.Helper()
	if !poll(func() bool { return metric(t, f.reg, name, pod, kv...) >= minimum }) {
		t.Fatalf("kvrouter_kvevents_%s{pod=%q %v} = %g, want >= %g", name, pod, kv, metric(t, f.reg, name, pod, kv...), minimum)
	}
}

// expectRouted checks that a follow-up of topic goes to pod for its prefix.
func (f *fleet) expectRouted(t *testing.T, topic, pod string) {
	t.Helper()
	res := f.send(t, prompt(topic, "One more question about it?"))
	h := res.UpstreamHeaders
	if h["x-kvrouter-pod"] != pod || h["x-kvrouter-reason"] != "prefix" || strings.HasPrefix(h["x-kvrouter-cached-blocks"], "0/") {
		t.Fatalf("follow-up on %s went to %s (%s, %s cached), want %s by prefix", topic, h["x-kvrouter-pod"], h["x-kvrouter-reason"], h["x-kvrouter-cached-blocks"], pod)
	}
}

// TestFaultLostBatchesReplayed: batches the PUB socket dropped are found
// missing at the next one and replayed; the index then holds exactly the
// pod's cache, and a follow-up of a prompt known only through the replay
// is routed to the pod.
func TestFaultLostBatchesReplayed(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 2, events: fastEvents})
	sim := f.sims["sim-0"]
	f.post(t, "sim-0", prompt("tides", "Why two a day?"))
	f.awaitExact(t, "sim-0", sim.Cached)
	// The connection's replays so far (from 0, then the recheck once idle)
	// are done: the lost batches can only be found through the gap.
	f.awaitMetric(t, "replays_total", "sim-0", 2, "result", "ok")
	gaps := metric(t, f.reg, "gaps_total", "sim-0")

	sim.LoseNext(3)
	for _, topic := range []string{"volcanoes", "glaciers", "comets"} {
		f.post(t, "sim-0", prompt(topic, "Explain it."))
	}
	f.post(t, "sim-0", prompt("deserts", "Explain it.")) // sent: reveals the gap
	f.awaitExact(t, "sim-0", sim.Cached)
	if got := metric(t, f.reg, "gaps_total", "sim-0"); got <= gaps {
		t.Errorf("gaps_total = %g after lost batches, want > %g; reconnects %g replays %g", got, gaps, metric(t, f.reg, "reconnects_total", "sim-0"), metric(t, f.reg, "replays_total", "sim-0", "result", "ok"))
	}
	if got := metric(t, f.reg, "clears_total", "sim-0", "reason", "exhausted"); got != 0 {
		t.Errorf("clears_total{exhausted} = %g, want 0: the replay buffer held the gap", got)
	}
	f.expectRouted(t, "glaciers", "sim-0")
}

// TestFaultReplayExhausted: a gap older than the pod's replay buffer clears
// the pod's entries (counted); the index then holds only blocks the pod
// really caches, none of the cleared ones, and routing by prefix resumes
// for what the pod stores afterwards.
func TestFaultReplayExhausted(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 2, events: fastEvents, publisher: func(i int, c *vllmpub.Config) {
		if i == 0 {
			c.BufferSteps = 2
		}
	}})
	sim := f.sims["sim-0"]
	f.post(t, "sim-0", prompt("tides", "Why two a day?"))
	f.awaitExact(t, "sim-0", sim.Cached)
	before := sim.Cached()

	sim.LoseNext(5)
	for _, topic := range []string{"volcanoes", "glaciers", "comets", "auroras", "monsoons"} {
		f.post(t, "sim-0", prompt(topic, "Explain it."))
	}
	f.post(t, "sim-0", prompt("deserts", "Explain it."))
	f.awaitMetric(t, "clears_total", "sim-0", 1, "reason", "exhausted")
	f.dropSpeculation()
	truth := sim.Cached()
	var held []uint64
	var entries int
	if !poll(func() bool { held, entries = f.indexed("sim-0", truth); return len(held) == entries && entries > 0 }) {
		t.Fatalf("after the clear the index holds %d entries for sim-0, %d of them cached by the pod; want only cached blocks", entries, len(held))
	}
	for _, h := range before {
		if slices.Contains(held, h) {
			t.Fatalf("block %x stored before the lost batches survived the clear", h)
		}
	}
	f.expectRouted(t, "deserts", "sim-0")
	// The pod still caches tides, but kvrouter no longer knows: a follow-up
	// matches nothing anywhere.
	if res := f.send(t, prompt("tides", "And the moon?")); !strings.HasPrefix(res.UpstreamHeaders["x-kvrouter-cached-blocks"], "0/") {
		t.Fatalf("a cleared prefix matched %s blocks, want 0", res.UpstreamHeaders["x-kvrouter-cached-blocks"])
	}
}

// TestFaultEventPortBlocked: one pod's event port is cut off (connections
// reset, new ones refused) while the pod keeps serving, then restored. The
// subscriber reconnects, replays what it missed, and the index again holds
// exactly the pod's cache; the other pod never stopped being followed.
func TestFaultEventPortBlocked(t *testing.T) {
	tp := toxiproxy.New(t)
	proxies := map[int]*toxiproxy.Proxy{}
	f := startFleetWith(t, fleetOptions{pods: 2, events: fastEvents, ports: func(i int, pub *vllmpub.Publisher) (int, int) {
		p, err := tp.Proxy(fmt.Sprintf("events-%d", i), "127.0.0.1:"+fmt.Sprint(port(t, pub.Endpoint())))
		if err != nil {
			t.Fatal(err)
		}
		proxies[i] = p
		return p.Port(), port(t, pub.ReplayEndpoint())
	}})
	sim := f.sims["sim-0"]
	f.post(t, "sim-0", prompt("tides", "Why two a day?"))
	f.awaitExact(t, "sim-0", sim.Cached)
	f.awaitMetric(t, "connected", "sim-0", 1, "rank", "0")

	if err := proxies[0].SetEnabled(false); err != nil { // its connections closed, new ones refused
		t.Fatal(err)
	}
	if !poll(func() bool { return metric(t, f.reg, "connected", "sim-0", "rank", "0") == 0 }) {
		t.Fatal("the subscriber of sim-0 still reports connected after its event port was cut off")
	}
	reconnects := metric(t, f.reg, "reconnects_total", "sim-0")
	for _, topic := range []string{"volcanoes", "glaciers"} {
		f.post(t, "sim-0", prompt(topic, "Explain it."))
	}
	f.post(t, "sim-1", prompt("comets", "Explain it."))
	f.awaitExact(t, "sim-1", f.sims["sim-1"].Cached)
	f.awaitMetric(t, "reconnects_total", "sim-0", reconnects+1) // refused while blocked

	if err := proxies[0].SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	f.awaitMetric(t, "connected", "sim-0", 1, "rank", "0")
	f.awaitExact(t, "sim-0", sim.Cached)
	if got := metric(t, f.reg, "clears_total", "sim-0", "reason", "restart"); got != 0 {
		t.Errorf("clears_total{restart} = %g, want 0: the same publisher came back", got)
	}
	f.expectRouted(t, "glaciers", "sim-0")
	f.expectRouted(t, "comets", "sim-1")
}

// slowE2E skips t unless `make test-e2e` runs it: it takes too long for
// `make test`.
func slowE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("KVROUTER_E2E") == "" {
		t.Skip("slow end-to-end test: run by make test-e2e (KVROUTER_E2E=1)")
	}
}
