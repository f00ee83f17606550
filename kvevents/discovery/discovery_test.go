package discovery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// recorder is a Consumer that writes down its calls.
type recorder struct {
	mu    sync.Mutex
	calls []string
	seen  chan string // every call, when not nil
}

func (r *recorder) Upsert(p pod.Pod) {
	r.record(fmt.Sprintf("upsert %s %s:%d ready=%v", p.Name, p.IP, p.Port, p.Ready))
}
func (r *recorder) Remove(name string) { r.record("remove " + name) }

func (r *recorder) record(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
	if r.seen != nil {
		r.seen <- s
	}
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTest(t *testing.T, objs ...runtime.Object) (*Discovery, *recorder, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	r := &recorder{}
	d, err := newDiscovery(testConfig(), client, r, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return d, r, client
}

// TestHandlers calls the informer's handlers directly, as the informer
// would, and checks what the consumer is told.
func TestHandlers(t *testing.T) {
	d, r, _ := newTest(t)
	h := d.handler()
	a := kpod("a", "10.0.0.1")
	notReady := a.DeepCopy()
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	moved := a.DeepCopy()
	moved.Status.PodIP = "10.0.0.9"
	unlabeled := moved.DeepCopy()
	unlabeled.Labels = nil
	pending := kpod("b", "")
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"add ready", func() { h.OnAdd(a, true) }, []string{"upsert llm/a 10.0.0.1:8000 ready=true"}},
		{"resync changes nothing", func() { h.OnUpdate(a, a.DeepCopy()) }, nil},
		{"not ready: kept, excluded", func() { h.OnUpdate(a, notReady) }, []string{"upsert llm/a 10.0.0.1:8000 ready=false"}},
		{"ready again", func() { h.OnUpdate(notReady, a) }, []string{"upsert llm/a 10.0.0.1:8000 ready=true"}},
		{"IP change: remove, add", func() { h.OnUpdate(a, moved) }, []string{"remove llm/a", "upsert llm/a 10.0.0.9:8000 ready=true"}},
		{"pending pod: nothing", func() { h.OnAdd(pending, false) }, nil},
		{"left the selector", func() { h.OnUpdate(moved, unlabeled) }, []string{"remove llm/a"}},
		{"back in the selector", func() { h.OnUpdate(unlabeled, moved) }, []string{"upsert llm/a 10.0.0.9:8000 ready=true"}},
		{"deleted, final state unknown", func() {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "llm/a", Obj: moved})
		}, []string{"remove llm/a"}},
		{"deleted again: nothing", func() { h.OnDelete(moved) }, nil},
	}
	for _, s := range steps {
		s.do()
		if got := r.take(); !slices.Equal(got, s.want) {
			t.Errorf("%s: consumer calls = %q, want %q", s.name, got, s.want)
		}
	}
}

// TestRun runs the informers on a fake clientset: existing pods are
// reported before Synced closes, and later changes follow.
func TestRun(t *testing.T) {
	d, r, client := newTest(t, kpod("a", "10.0.0.1"), kpod("b", ""))
	r.seen = make(chan string, 16)
	watching := make(chan struct{})
	client.PrependWatchReactor("pods", func(action clienttesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		close(watching)
		return true, w, err
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-d.Synced()
	if got := r.take(); !slices.Equal(got, []string{"upsert llm/a 10.0.0.1:8000 ready=true"}) {
		t.Errorf("calls before Synced = %q, want llm/a upserted", got)
	}
	<-r.seen
	<-watching
	b := kpod("b", "10.0.0.2")
	if _, err := client.CoreV1().Pods("llm").UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(t, r.seen, "upsert llm/b 10.0.0.2:8000 ready=true")
	if err := client.CoreV1().Pods("llm").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want(t, r.seen, "remove llm/a")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func want(t *testing.T, seen <-chan string, call string) {
	t.Helper()
	select {
	case got := <-seen:
		if got != call {
			t.Errorf("consumer call = %q, want %q", got, call)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no consumer call, want %q", call)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	d, err := newDiscovery(testConfig(), fake.NewClientset(), &recorder{}, reg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	h := d.handler()
	notReady := kpod("b", "10.0.0.2")
	notReady.Status.Conditions = nil
	bad := kpod("c", "10.0.0.3")
	bad.Annotations = map[string]string{AnnotationDPSize: "many"}
	h.OnAdd(kpod("a", "10.0.0.1"), true)
	h.OnAdd(notReady, true)
	h.OnAdd(bad, true)
	want := `
# HELP kvrouter_discovery_ignored_annotations_total kvrouter.io/* pod annotations ignored as invalid, or pods skipped for lack of a model.
# TYPE kvrouter_discovery_ignored_annotations_total counter
kvrouter_discovery_ignored_annotations_total 1
# HELP kvrouter_discovery_pods Discovered vLLM pods with an IP, by state (ready, not_ready).
# TYPE kvrouter_discovery_pods gauge
kvrouter_discovery_pods{state="not_ready"} 1
kvrouter_discovery_pods{state="ready"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvrouter_discovery_pods", "kvrouter_discovery_ignored_annotations_total"); err != nil {
		t.Error(err)
	}
	if _, err := newDiscovery(testConfig(), fake.NewClientset(), &recorder{}, reg, quiet()); err == nil {
		t.Error("a second Discovery on the same registry = nil error, want a registration error")
	}
}
