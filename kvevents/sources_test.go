package kvevents

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// TestParseSources reads the three shapes vLLM's answer has been seen in,
// and refuses what is not one of them.
func TestParseSources(t *testing.T) {
	keyed := `{"0": {"endpoint": "tcp://*:41001", "replay_endpoint": "tcp://*:41003", "topic": "kv", "publisher": "zmq", "buffer_steps": 10000},
	           "1": {"endpoint": "tcp://*:41002", "replay_endpoint": null, "topic": "kv", "publisher": "zmq"}}`
	listed := `{"sources": [{"data_parallel_rank": 1, "endpoint": "tcp://*:41002", "replay_endpoint": null, "topic": "kv"},
	                        {"data_parallel_rank": 0, "endpoint": "tcp://*:41001", "replay_endpoint": "tcp://*:41003", "topic": "kv"}]}`
	bare := `[{"data_parallel_rank": 0, "endpoint": "tcp://*:41001", "replay_endpoint": "tcp://*:41003", "topic": "kv"},
	          {"data_parallel_rank": 1, "endpoint": "tcp://*:41002", "topic": "kv"}]`
	want := []Source{
		{From: "kv_event_sources", Endpoint: "tcp://10.0.0.7:41001", Replay: "tcp://10.0.0.7:41003", Topic: "kv"},
		{From: "kv_event_sources", Endpoint: "tcp://10.0.0.7:41002", Topic: "kv"},
	}
	for name, body := range map[string]string{"keyed": keyed, "listed": listed, "bare": bare} {
		raw, err := parseSources([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for rank, w := range want {
			if got, err := resolveSource(raw, rank, "10.0.0.7"); err != nil || got != w {
				t.Errorf("%s: rank %d = %+v, %v; want %+v", name, rank, got, err, w)
			}
		}
	}
	for _, bad := range []string{``, `"x"`, `{"a": {}}`, `{"-1": {}}`, `{"sources": 3}`, `[{"data_parallel_rank": 0}, {"data_parallel_rank": 0}]`} {
		if _, err := parseSources([]byte(bad)); err == nil {
			t.Errorf("parseSources(%q) = nil error", bad)
		}
	}
}

// TestResolveSource: endpoints bound to every interface or to loopback are
// reached on the pod's address; answers kvrouter cannot use say why.
func TestResolveSource(t *testing.T) {
	for endpoint, want := range map[string]string{
		"tcp://0.0.0.0:5557":     "tcp://10.0.0.7:5557",
		"tcp://[::]:5557":        "tcp://10.0.0.7:5557",
		"tcp://127.0.0.1:5557":   "tcp://10.0.0.7:5557",
		"tcp://localhost:5557":   "tcp://10.0.0.7:5557",
		"tcp://10.1.2.3:5557":    "tcp://10.1.2.3:5557",
		"tcp://node-a.local:999": "tcp://node-a.local:999",
	} {
		if got, err := reachable(endpoint, "10.0.0.7"); err != nil || got != want {
			t.Errorf("reachable(%q) = %q, %v; want %q", endpoint, got, err, want)
		}
	}
	refused := map[string]string{
		`{"0": {"endpoint": "tcp://*:5557", "publisher": "null"}}`:               `publisher is "null"`,
		`{"0": {"endpoint": "tcp://*:5557", "encoding": "json"}}`:                `encoding is "json"`,
		`{"0": {"replay_endpoint": "tcp://*:5558"}}`:                             "no endpoint",
		`{"0": {"endpoint": "ipc:///tmp/kv"}}`:                                   "not a tcp:// endpoint",
		`{"0": {"endpoint": "tcp://*:0"}}`:                                       "no bound port",
		`{"0": {"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*"}}`:      "replay endpoint",
		`{"1": {"endpoint": "tcp://*:5557"}, "2": {"endpoint": "tcp://*:5558"}}`: "no entry for data-parallel rank 0 (the answer has [1 2])",
	}
	// An API server of one rank answers that rank alone: followed.
	one, err := parseSources([]byte(`{"3": {"endpoint": "tcp://*:6000"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := resolveSource(one, 0, "10.0.0.7"); err != nil || got.Endpoint != "tcp://10.0.0.7:6000" {
		t.Errorf("a one-rank answer = %+v, %v; want it followed", got, err)
	}
	for body, want := range refused {
		raw, err := parseSources([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if _, err := resolveSource(raw, 0, "10.0.0.7"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("resolveSource(%s) = %v, want an error saying %q", body, err, want)
		}
	}
}

// fakeSources is a vLLM API server that serves only /kv_event_sources,
// its answer set by the test.
type fakeSources struct {
	srv    *httptest.Server
	mu     sync.Mutex
	answer string
	status int
}

func newFakeSources(t *testing.T) *fakeSources {
	f := &fakeSources{status: http.StatusOK}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.URL.Path != "/kv_event_sources" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(f.answer))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSources) set(status int, answer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.answer = status, answer
}

// pod is a pod of this server with no event ports configured.
func (f *fakeSources) pod(t *testing.T, name string, dp int) pod.Pod {
	_, port, err := net.SplitHostPort(f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return pod.Pod{Name: name, IP: "127.0.0.1", Port: p, Model: "m", DPSize: dp}
}

// answerFor announces pubs as ranks 0, 1, ..., bound to every interface.
func answerFor(pubs ...*pub) string {
	var parts []string
	for k, p := range pubs {
		parts = append(parts, fmt.Sprintf(`"%d": {"endpoint": "tcp://0.0.0.0:%d", "replay_endpoint": "tcp://*:%d", "topic": "", "publisher": "zmq"}`, k, p.eventPort, p.replayPort))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// TestSourcesFollowed: a pod of two data-parallel ranks publishing on
// ephemeral ports, configured with no ports at all, is followed rank by
// rank (as serve follows one, pod.Ranks) where its /kv_event_sources says;
// restarted onto new ports, it is followed there.
func TestSourcesFollowed(t *testing.T) {
	checkGoroutines(t)
	fake := newFakeSources(t)
	r0, r1 := startPub(t, 0, 0, 100), startPub(t, 0, 0, 100)
	fake.set(http.StatusOK, answerFor(r0, r1))
	r0.publish(t, 1)
	r1.publish(t, 2)
	f := newFleet(t, testConfig())
	ranks := pod.Ranks(fake.pod(t, "pod-a", 2))
	for _, c := range ranks {
		if err := f.mgr.Ensure(c); err != nil {
			t.Fatal(err)
		}
	}
	f.waitHashes(ranks[0].Name, 1)
	f.waitHashes(ranks[1].Name, 2)

	// A restart: new processes on new ports, numbering from 0 again. They
	// bind (and the answer names them) before the old ones let go, so that
	// no new publisher takes an old one's port.
	n0, n1 := startPub(t, 0, 0, 100), startPub(t, 0, 0, 100)
	fake.set(http.StatusOK, answerFor(n0, n1))
	r0.stop()
	r1.stop()
	n0.publish(t, 10)
	n1.publish(t, 11)
	f.waitHashes(ranks[0].Name, 10)
	f.waitHashes(ranks[1].Name, 11)
	st := f.mgr.Status()
	slices.SortFunc(st, func(a, b PodStatus) int { return strings.Compare(a.Name, b.Name) })
	for k, p := range []*pub{n0, n1} {
		want := Source{From: "kv_event_sources", Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.eventPort), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", p.replayPort)}
		if got := st[k].Ranks[0].Source; got == nil || *got != want {
			t.Errorf("rank %d's source = %+v, want %+v", k, got, want)
		}
	}
	for _, c := range ranks {
		if got := f.counter(f.mgr.metrics.sources, c.Name, "discovered"); got < 2 {
			t.Errorf("event_sources_total{%s, discovered} = %v, want asked twice at least", c.Name, got)
		}
	}
}

// TestSourcesRefusedOrAbsent: an answer kvrouter cannot use is refused for
// its pod alone, which follows nothing and says why; a pod that serves no
// such route is followed on the default ports; a pod with ports configured
// is not asked.
func TestSourcesRefusedOrAbsent(t *testing.T) {
	checkGoroutines(t)
	refusing, absent := newFakeSources(t), newFakeSources(t)
	refusing.set(http.StatusOK, `{"0": {"endpoint": "tcp://*:5557", "publisher": "null"}}`)
	absent.set(http.StatusNotFound, `{"detail": "Not Found"}`)
	p := startPub(t, 0, 0, 100)
	p.publish(t, 7)
	cfg := testConfig()
	cfg.EventPort, cfg.ReplayPort = p.eventPort, p.replayPort
	f := newFleet(t, cfg)
	for _, q := range []pod.Pod{refusing.pod(t, "pod-refused", 0), absent.pod(t, "pod-old", 0)} {
		if err := f.mgr.Ensure(q); err != nil {
			t.Fatal(err)
		}
	}
	f.waitHashes("pod-old", 7)
	eventually(t, "the refusal", func() bool { return f.counter(f.mgr.metrics.sources, "pod-refused", "refused") >= 1 })
	for _, st := range f.mgr.Status() {
		src := st.Ranks[0].Source
		switch st.Name {
		case "pod-refused":
			if src == nil || !strings.Contains(src.Refused, `publisher is "null"`) || st.Ranks[0].Connected {
				t.Errorf("pod-refused: rank 0 = %+v, source %+v; want refused, not connected", st.Ranks[0], src)
			}
		case "pod-old":
			if src == nil || src.From != "ports" || src.Endpoint != fmt.Sprintf("tcp://127.0.0.1:%d", p.eventPort) {
				t.Errorf("pod-old's source = %+v, want the default ports", src)
			}
		}
	}
	if got := f.counter(f.mgr.metrics.sources, "pod-old", "absent"); got < 1 {
		t.Errorf("event_sources_total{pod-old, absent} = %v, want >= 1", got)
	}
	if got := len(f.idx.hashes("pod-refused")); got != 0 {
		t.Errorf("pod-refused has %d entries, want none", got)
	}
}
