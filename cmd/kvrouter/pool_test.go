package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestServePool runs serve with --pool-name on a real kube-apiserver that
// gets the GIE module's InferencePool CRD and nothing of kvrouter's own (no
// kvrouter.io/pool label): not ready while the CRD or the pool is missing,
// /readyz saying why; ready with the pool's pod to route to once the pool and a
// ready pod exist; not ready again, with no pod, once the pool is deleted.
func TestServePool(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	kubeconfig := api.Kubeconfig(t, kubeapi.AdminToken)
	if _, err := api.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{
		"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json", "--admin-auth", "none", "--hub-offline",
		"--kubeconfig", kubeconfig, "--pool-name", "qwen", "--pool-namespace", "llm", "--default-model", "Qwen/Qwen3-0.6B",
	}
	go func() { done <- run(runCtx, args, io.Discard, pw); _ = pw.Close() }()
	urls := announced(t, pr, "admin server", "ext_proc gRPC server")
	base := urls["admin server"]
	// In a cluster the ext_proc port serves TLS with a self-signed
	// certificate: the client encrypts without verifying, as gateways do.
	conn, err := grpc.NewClient(urls["ext_proc gRPC server"], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}))) //nolint:gosec // see above
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	envoy := envoyclient.New(conn)
	completion := envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"Qwen/Qwen3-0.6B","prompt":"hello"}`)}
	readyz := func(code int, says string) {
		t.Helper()
		waitFor(t, "/readyz to answer "+says, func() bool {
			c, body := get(t, base+"/readyz")
			return c == code && strings.Contains(body, says)
		})
	}
	// No CRD yet: the pool cannot be listed, and /readyz says so.
	readyz(http.StatusServiceUnavailable, "InferencePool llm/qwen cannot be read")
	pools := api.InstallInferencePoolCRD(t, "llm")

	readyz(http.StatusServiceUnavailable, "not ready: InferencePool llm/qwen not found: no pod is served")

	readyPod(t, api, "llm", "vllm-0", "10.255.255.7", map[string]string{"app": "vllm"})
	var pool map[string]any
	if err := yaml.Unmarshal([]byte(`
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: qwen, namespace: llm}
spec:
  selector: {matchLabels: {app: vllm}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {kind: Service, name: kvrouter, port: {number: 9002}}
`), &pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Create(ctx, &unstructured.Unstructured{Object: pool}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	readyz(http.StatusOK, "ready: 1 pod to route to")
	if res, err := envoy.Do(ctx, completion); err != nil || res.Destination != "10.255.255.7:8000" {
		t.Errorf("a completion through ext_proc = %+v, %v; want routed to the pool's pod", res, err)
	}
	_, body := get(t, base+"/debug/pods")
	for _, want := range []string{`"name": "llm/vllm-0"`, `"address": "10.255.255.7:8000"`, `"ready": true`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /debug/pods = %s, want it to contain %s", body, want)
		}
	}

	if err := pools.Delete(ctx, "qwen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	readyz(http.StatusServiceUnavailable, "not ready: InferencePool llm/qwen was deleted: no pod is served")
	if _, body := get(t, base+"/debug/pods"); strings.Contains(body, "vllm-0") {
		t.Errorf("GET /debug/pods after the pool was deleted = %s, want no pod", body)
	}
	if res, err := envoy.Do(ctx, completion); err != nil || res.Status != http.StatusServiceUnavailable {
		t.Errorf("a completion once the pool is gone = %+v, %v; want 503: its model was served", res, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel = %v, want nil", err)
	}
}

// readyPod creates a running, ready pod with labels and ip in namespace.
func readyPod(t *testing.T, api *kubeapi.Server, namespace, name, ip string, labels map[string]string) {
	t.Helper()
	pods := api.Admin.CoreV1().Pods(namespace)
	p, err := pods.Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err = pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond, an outside process's state, until it holds; the
// deadline is a hang guard, not a performance bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolConfig checks the pool flags reach discovery, their defaults,
// and the combinations refused.
func TestPoolConfig(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "https://127.0.0.1:1")
	for _, tt := range []struct {
		args    []string
		pool    string // namespace/name discovery is given; "" for none
		problem string // a problem validate reports; "" for none
	}{
		{args: []string{"--kubeconfig", kubeconfig}},
		{args: []string{"--kubeconfig", kubeconfig, "--pool-name", "qwen", "--pool-namespace", "llm"}, pool: "llm/qwen"},
		{args: []string{"--kubeconfig", kubeconfig, "--pool-name", "qwen"}, pool: "default/qwen"},
		{args: []string{"--kubeconfig", "off", "--pool-name", "qwen"}, problem: `--pool-name: "qwen" needs Kubernetes discovery, which is off (kubeconfig)`},
		{args: []string{"--kubeconfig", kubeconfig, "--pool-namespace", "llm"}, problem: `--pool-namespace: "llm" without pool.name`},
		{args: []string{"--kubeconfig", kubeconfig, "--pool-name", "qwen", "--namespace", "llm"}, problem: "--namespace: set with a pool"},
	} {
		c, err := loadConfig(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.validate("")
		switch {
		case tt.problem != "":
			if err == nil || !strings.Contains(err.Error(), tt.problem) {
				t.Errorf("validate(%q) = %v, want the problem %q", tt.args, err, tt.problem)
			}
		case err != nil:
			t.Errorf("validate(%q) = %v", tt.args, err)
		case tt.pool == "" && s.disc.Pool.Name != "", tt.pool != "" && s.disc.Pool.String() != tt.pool:
			t.Errorf("validate(%q): pool %+v, want %q", tt.args, s.disc.Pool, tt.pool)
		}
	}
}
