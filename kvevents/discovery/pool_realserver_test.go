package discovery

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// applyGIERBAC applies manifests-gie/rbac.yaml (the Role that reads pools
// and objectives, and its binding) in testNamespace.
func applyGIERBAC(t *testing.T, c *kubernetes.Clientset) {
	t.Helper()
	applyManifest(t, c, "../../manifests-gie/rbac.yaml")
}

// rankRecorder writes down the consumer's calls with the event ports.
type rankRecorder struct{ seen chan string }

func (r rankRecorder) Upsert(p pod.Pod) {
	r.seen <- fmt.Sprintf("upsert %s %s:%d events=%d/%d dp=%d ready=%v", p.Name, p.IP, p.Port, p.EventPort, p.ReplayPort, p.DPSize, p.Ready)
}
func (r rankRecorder) Remove(name string) { r.seen <- "remove " + name }

// wantSet takes len(want) calls and checks they are want in any order:
// the candidates of one pool change come in map order.
func wantSet(t *testing.T, seen <-chan string, want ...string) {
	t.Helper()
	got := map[string]int{}
	for range want {
		select {
		case s := <-seen:
			got[s]++
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out; got %v, want %q", got, want)
		}
	}
	for _, w := range want {
		if got[w] == 0 {
			t.Fatalf("calls %v, want %q", got, want)
		}
		got[w]--
	}
}

func noMore(t *testing.T, seen <-chan string) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	select {
	case extra := <-seen:
		t.Fatalf("unexpected consumer call %q", extra)
	default:
	}
}

// problems records what OnPool is told.
type problems struct {
	mu   sync.Mutex
	last *string
}

func (p *problems) set(why string) { p.mu.Lock(); p.last = &why; p.mu.Unlock() }
func (p *problems) get() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return "", false
	}
	return *p.last, true
}

func waitProblem(t *testing.T, p *problems, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := p.get()
		if ok && strings.Contains(got, want) && (want != "" || got == "") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("OnPool last told %q (told: %v), want %q", got, ok, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRealAPIServerPool serves the pods of an InferencePool on a real
// kube-apiserver with the GIE module's CRD, as the manifests' ServiceAccount
// with the gie overlay's Role: missing pool (no pods, reported), pool
// created, pods ready and not, the pool's selector and target ports edited
// (two ports: two DP ranks, each its own candidate with its own events),
// pod deleted, pool deleted (no pods, reported).
func TestRealAPIServerPool(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	token := applyRBAC(t, api.Admin)
	applyGIERBAC(t, api.Admin)
	pools := api.InstallInferencePoolCRD(t, testNamespace)

	cfg := testConfig()
	cfg.Kubeconfig, cfg.DefaultModel = api.Kubeconfig(t, token), "m"
	cfg.Pool = PoolRef{Name: "llm", Namespace: testNamespace}
	r := rankRecorder{seen: make(chan string, 64)}
	reg := prometheus.NewRegistry()
	d, err := New(cfg, r, reg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	told := &problems{}
	d.OnPool(told.set)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()

	// Pods first, no pool: nothing is served, and the pool is reported missing.
	create(t, api.Admin, testNamespace, "a", map[string]string{"app": "vllm"})
	create(t, api.Admin, testNamespace, "b", map[string]string{"app": "vllm", "tier": "big"})
	create(t, api.Admin, testNamespace, "c", map[string]string{"app": "other"})
	setStatus(t, api.Admin, testNamespace, "a", "10.0.0.1", true)
	setStatus(t, api.Admin, testNamespace, "b", "10.0.0.2", true)
	setStatus(t, api.Admin, testNamespace, "c", "10.0.0.3", true)
	<-d.Synced()
	waitProblem(t, told, "InferencePool kvrouter/llm not found")
	noMore(t, r.seen)
	if got := testutil.ToFloat64(d.metrics.pool); got != 0 {
		t.Errorf("pool_found = %v, want 0", got)
	}

	pool := &giev1.InferencePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: giev1.GroupVersion.String(), Kind: "InferencePool"},
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: testNamespace},
		Spec: giev1.InferencePoolSpec{
			Selector:    giev1.LabelSelector{MatchLabels: map[giev1.LabelKey]giev1.LabelValue{"app": "vllm"}},
			TargetPorts: []giev1.Port{{Number: 8000}},
			EndpointPickerRef: giev1.EndpointPickerRef{
				Kind: "Service", Name: "kvrouter", Port: &giev1.Port{Number: 9002},
			},
		},
	}
	u := toUnstructured(t, pool)
	created, err := pools.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pool: %v", err)
	}
	wantSet(t, r.seen,
		"upsert kvrouter/a 10.0.0.1:8000 events=0/0 dp=0 ready=true",
		"upsert kvrouter/b 10.0.0.2:8000 events=0/0 dp=0 ready=true")
	waitProblem(t, told, "")
	if got := testutil.ToFloat64(d.metrics.pool); got != 1 {
		t.Errorf("pool_found = %v, want 1", got)
	}

	// A pod not ready stays known, excluded.
	setStatus(t, api.Admin, testNamespace, "a", "10.0.0.1", false)
	wantSet(t, r.seen, "upsert kvrouter/a 10.0.0.1:8000 events=0/0 dp=0 ready=false")

	// Selector edit: only b matches now.
	created.Object["spec"].(map[string]any)["selector"] = map[string]any{"matchLabels": map[string]any{"app": "vllm", "tier": "big"}}
	if created, err = pools.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pool: %v", err)
	}
	wantSet(t, r.seen, "remove kvrouter/a")
	noMore(t, r.seen)

	// Target ports edit: two ports are b's two DP ranks, each its own
	// candidate on its own event ports.
	created.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(8000)}, map[string]any{"number": int64(8001)}}
	if created, err = pools.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pool: %v", err)
	}
	wantSet(t, r.seen,
		"upsert kvrouter/b:rank-1 10.0.0.2:8001 events=5558/5559 dp=0 ready=true")
	noMore(t, r.seen)
	// Back to one port: rank 1 goes.
	created.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(8000)}}
	if created, err = pools.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pool: %v", err)
	}
	wantSet(t, r.seen, "remove kvrouter/b:rank-1")
	// And a port move: the candidate changes port.
	created.Object["spec"].(map[string]any)["targetPorts"] = []any{map[string]any{"number": int64(9000)}, map[string]any{"number": int64(9001)}}
	if _, err = pools.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pool: %v", err)
	}
	wantSet(t, r.seen,
		"upsert kvrouter/b 10.0.0.2:9000 events=0/0 dp=0 ready=true",
		"upsert kvrouter/b:rank-1 10.0.0.2:9001 events=5558/5559 dp=0 ready=true")

	// Pod deleted: its ranks are excluded while it terminates, and go
	// with it.
	if err := api.Admin.CoreV1().Pods(testNamespace).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantSet(t, r.seen,
		"upsert kvrouter/b 10.0.0.2:9000 events=0/0 dp=0 ready=false",
		"upsert kvrouter/b:rank-1 10.0.0.2:9001 events=5558/5559 dp=0 ready=false")
	zero := int64(0)
	if err := api.Admin.CoreV1().Pods(testNamespace).Delete(ctx, "b", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	wantSet(t, r.seen, "remove kvrouter/b", "remove kvrouter/b:rank-1")

	// A new pod matching the pool appears; then the pool is deleted:
	// nothing is served, and the pool is reported missing.
	create(t, api.Admin, testNamespace, "d", map[string]string{"app": "vllm", "tier": "big"})
	setStatus(t, api.Admin, testNamespace, "d", "10.0.0.4", true)
	wantSet(t, r.seen,
		"upsert kvrouter/d 10.0.0.4:9000 events=0/0 dp=0 ready=true",
		"upsert kvrouter/d:rank-1 10.0.0.4:9001 events=5558/5559 dp=0 ready=true")
	if err := pools.Delete(ctx, "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantSet(t, r.seen, "remove kvrouter/d", "remove kvrouter/d:rank-1")
	waitProblem(t, told, "InferencePool kvrouter/llm was deleted")
	if got := testutil.ToFloat64(d.metrics.pool); got != 0 {
		t.Errorf("pool_found = %v after delete, want 0", got)
	}
	if d.known() != 0 {
		t.Errorf("%d pods known after the pool went, want 0", d.known())
	}

	// The gie Role reads pools, and does not write them.
	saRC, err := clientcmd.BuildConfigFromFlags("", api.Kubeconfig(t, token))
	if err != nil {
		t.Fatal(err)
	}
	saDyn, err := dynamic.NewForConfig(saRC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saDyn.Resource(PoolResource).Namespace(testNamespace).Create(ctx, u, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount creates a pool: %v, want Forbidden", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	noMore(t, r.seen)
}

func toUnstructured(t *testing.T, o runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}
