package discovery

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

// TestRealAPIServerObjectives follows the InferenceObjectives of the pool's
// namespace on a real kube-apiserver with the Gateway API Inference
// Extension's CRD, as the manifests' ServiceAccount with the GIE overlay's
// Role: those naming the pool give their priorities (none: 0), those
// naming another pool are left out, and edits and deletions are told; in
// llm-d's group (llm-d.ai/v1alpha2) as in GIE's, llm-d's winning a name
// both use.
func TestRealAPIServerObjectives(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	token := applyRBAC(t, api.Admin)
	applyGIERBAC(t, api.Admin)
	api.InstallInferencePoolCRD(t, testNamespace)
	objs := api.InstallInferenceObjectiveCRD(t, testNamespace)
	llmd := api.InstallLLMDObjectiveCRD(t, testNamespace)

	cfg := testConfig()
	cfg.Kubeconfig, cfg.DefaultModel = api.Kubeconfig(t, token), "m"
	cfg.Pool = PoolRef{Name: "llm", Namespace: testNamespace}
	d, err := New(cfg, rankRecorder{seen: make(chan string, 64)}, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan map[string]int, 16)
	d.OnObjectives(func(m map[string]int) { told <- m })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	objectiveIn := func(apiVersion, name, pool string, priority *int) *unstructured.Unstructured {
		spec := map[string]any{"poolRef": map[string]any{"name": pool}}
		if priority != nil {
			spec["priority"] = int64(*priority)
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion, "kind": "InferenceObjective",
			"metadata": map[string]any{"name": name, "namespace": testNamespace}, "spec": spec,
		}}
	}
	objective := func(name, pool string, priority *int) *unstructured.Unstructured {
		return objectiveIn("inference.networking.x-k8s.io/v1alpha2", name, pool, priority)
	}
	want := func(w map[string]int) {
		t.Helper()
		var last map[string]int
		deadline := time.After(10 * time.Second)
		for !maps.Equal(last, w) {
			select {
			case last = <-told:
			case <-deadline:
				t.Fatalf("objectives told %v, want %v", last, w)
			}
		}
	}
	minus1, three := -1, 3
	for _, o := range []*unstructured.Unstructured{objective("batch", "llm", &minus1), objective("chat", "llm", nil), objective("elsewhere", "other", &three)} {
		if _, err := objs.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want(map[string]int{"batch": -1, "chat": 0})
	b, err := objs.Get(ctx, "batch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(b.Object, int64(-5), "spec", "priority"); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(map[string]int{"batch": -5, "chat": 0})
	if err := objs.Delete(ctx, "chat", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want(map[string]int{"batch": -5})
	e, err := objs.Get(ctx, "elsewhere", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(e.Object, "llm", "spec", "poolRef", "name"); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Update(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(fmt.Errorf("move elsewhere to llm: %w", err))
	}
	want(map[string]int{"batch": -5, "elsewhere": 3})

	// llm-d's group too, its objective winning over GIE's of the same name.
	seven, two := -7, 2
	for _, o := range []*unstructured.Unstructured{objectiveIn("llm-d.ai/v1alpha2", "batch", "llm", &seven), objectiveIn("llm-d.ai/v1alpha2", "fresh", "llm", &two)} {
		if _, err := llmd.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want(map[string]int{"batch": -7, "elsewhere": 3, "fresh": 2})
	if err := llmd.Delete(ctx, "batch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want(map[string]int{"batch": -5, "elsewhere": 3, "fresh": 2})
}
