package test

import (
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

// runPod creates a ready vLLM pod at 127.0.0.1 serving qwen3, as the
// kubelet would report it.
func runPod(t *testing.T, admin *kubernetes.Clientset, name string) {
	t.Helper()
	ctx := t.Context()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "kvrouter", Labels: map[string]string{"kvrouter.io/pool": "default"},
			Annotations: map[string]string{"kvrouter.io/model": "qwen3", "kvrouter.io/port": "8000"},
		},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}
	p, err := admin.CoreV1().Pods("kvrouter").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := admin.CoreV1().Pods("kvrouter").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pods returns the names /debug/pods lists.
func (p *kvrouterProcess) pods(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for name := range p.podEntries(t) {
		out[name] = true
	}
	return out
}

// TestE2EAPIServerRestart runs the kvrouter binary with discovery against a
// real kube-apiserver: not ready while the API server is down at start,
// ready once the informer synced; after the API server is killed and
// started again, with pods deleted and created meanwhile and etcd
// compacting every second, discovery resumes and kvrouter's pods are
// exactly the cluster's.
func TestE2EAPIServerRestart(t *testing.T) {
	slowE2E(t)
	api := kubeapi.New(t, kubeapi.Options{
		Require: true, // make test-e2e builds it first
		// Watches read etcd directly and etcd is compacted every second, so a
		// watch resumed from an old resourceVersion after a restart can find
		// it compacted (410 Gone) and the informer must relist.
		Args: []string{"--watch-cache=false", "--etcd-compaction-interval=1s"},
	})
	bin := buildKVRouter(t)
	api.Start(t) // once, for its certificates: the kubeconfig names the CA
	api.Stop()
	kubeconfig := api.Kubeconfig(t, kubeapi.AdminToken)
	router := startKVRouter(t, bin, "--kubeconfig", kubeconfig, "--namespace", "kvrouter", "--model", "qwen3="+qwen3Dir(t))
	// With discovery the admin endpoints are behind the API server's
	// authorization: the admin token's user may read them, no token may not.
	router.token = kubeapi.AdminToken
	// The API server is down: the informer cannot list, so kvrouter (which
	// listens already) must not report ready.
	if router.ready(t) {
		t.Fatal("kvrouter ready before its pod informer ever synced")
	}
	// It says why: the API server's error.
	if !poll(func() bool { return strings.Contains(router.readyz(t), "; the API server: ") }) {
		t.Errorf("/readyz while the API server is down = %q, want it to give the API server's error", router.readyz(t))
	}
	api.Start(t)
	if _, err := api.Admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvrouter"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !poll(func() bool { return router.ready(t) }) {
		t.Fatal("kvrouter never became ready after the API server came up")
	}
	runPod(t, api.Admin, "before")
	runPod(t, api.Admin, "doomed")
	if !poll(func() bool { p := router.pods(t); return p["kvrouter/before"] && p["kvrouter/doomed"] }) {
		t.Fatalf("kvrouter's pods = %v, want before and doomed", router.pods(t))
	}
	for _, path := range []string{"/debug/pods", "/metrics"} {
		resp, err := http.Get("http://" + router.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %s, want 401: kvrouter in Kubernetes guards its admin endpoints", path, resp.Status)
		}
	}

	api.Stop()
	api.Start(t)
	// While kvrouter's watch is broken: one pod goes, one comes.
	zero := int64(0)
	if err := api.Admin.CoreV1().Pods("kvrouter").Delete(t.Context(), "doomed", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	runPod(t, api.Admin, "after")
	want := map[string]bool{"kvrouter/before": true, "kvrouter/after": true}
	var got map[string]bool
	if !poll(func() bool {
		got = router.pods(t)
		return len(got) == 2 && got["kvrouter/before"] && got["kvrouter/after"]
	}) {
		t.Fatalf("after the API server restart kvrouter's pods = %v, want %v", got, want)
	}
	if !router.ready(t) {
		t.Error("kvrouter not ready after the API server restart")
	}
}
