package discovery

import (
	"context"
	"os"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

const testNamespace = "kvrouter"

// applyRBAC creates the manifests' ServiceAccount, Role and RoleBinding and
// returns a token of that ServiceAccount.
func applyRBAC(t *testing.T, c *kubernetes.Clientset) string {
	t.Helper()
	ctx := t.Context()
	for _, ns := range []string{testNamespace, "elsewhere"} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	account := applyManifest(t, c, "../../manifests/rbac.yaml")
	tok, err := c.CoreV1().ServiceAccounts(testNamespace).CreateToken(ctx, account, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// applyManifest creates the ServiceAccounts, Roles, bindings and cluster
// roles of a manifest file, the namespaced ones in testNamespace, and
// returns the name of its ServiceAccount ("" when it has none).
func applyManifest(t *testing.T, c *kubernetes.Clientset, path string) (account string) {
	t.Helper()
	ctx := t.Context()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			mustDecode(t, doc, &o)
			account = o.Name
			_, err = c.CoreV1().ServiceAccounts(testNamespace).Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			mustDecode(t, doc, &o)
			_, err = c.RbacV1().Roles(testNamespace).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			mustDecode(t, doc, &o)
			_, err = c.RbacV1().RoleBindings(testNamespace).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			mustDecode(t, doc, &o)
			_, err = c.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			mustDecode(t, doc, &o)
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: unexpected kind %q", path, head.Kind)
		}
		if err != nil {
			t.Fatalf("%s: apply %s: %v", path, head.Kind, err)
		}
	}
	return account
}

func mustDecode(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatal(err)
	}
}

// TestRealAPIServer runs discovery against a real kube-apiserver and etcd,
// as the manifests' ServiceAccount: pods are created, made ready, moved,
// relabeled and deleted, and the consumer follows; pods outside the selector
// or the namespace never appear; the Role allows nothing beyond reading pods.
func TestRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	token := applyRBAC(t, api.Admin)

	cfg := testConfig()
	cfg.Kubeconfig, cfg.Namespaces = api.Kubeconfig(t, token), []string{testNamespace}
	r := &recorder{seen: make(chan string, 64)}
	d, err := New(cfg, r, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	<-d.Synced()

	pods := api.Admin.CoreV1().Pods(testNamespace)
	create(t, api.Admin, testNamespace, "outsider", nil) // outside the selector
	create(t, api.Admin, "elsewhere", "a", selected())   // outside the namespace
	create(t, api.Admin, testNamespace, "a", selected()) // pending: no IP yet
	setStatus(t, api.Admin, "elsewhere", "a", "10.0.9.1", true)
	setStatus(t, api.Admin, testNamespace, "outsider", "10.0.9.2", true)
	setStatus(t, api.Admin, testNamespace, "a", "10.0.0.1", true)
	want(t, r.seen, "upsert kvrouter/a 10.0.0.1:8000 ready=true")
	setStatus(t, api.Admin, testNamespace, "a", "10.0.0.1", false)
	want(t, r.seen, "upsert kvrouter/a 10.0.0.1:8000 ready=false")
	// A restarted pod sandbox: a new IP is a new subscription.
	a := setStatus(t, api.Admin, testNamespace, "a", "10.0.0.2", true)
	want(t, r.seen, "remove kvrouter/a")
	want(t, r.seen, "upsert kvrouter/a 10.0.0.2:8000 ready=true")
	// Leaving the selector is a delete for the server-side filtered watch.
	a.Labels = nil
	if _, err := pods.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(t, r.seen, "remove kvrouter/a")
	o, err := pods.Get(ctx, "outsider", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.Labels = selected()
	if _, err := pods.Update(ctx, o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(t, r.seen, "upsert kvrouter/outsider 10.0.9.2:8000 ready=true")
	// A terminating pod is excluded at once; it goes when the object does.
	if err := pods.Delete(ctx, "outsider", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want(t, r.seen, "upsert kvrouter/outsider 10.0.9.2:8000 ready=false")
	zero := int64(0)
	if err := pods.Delete(ctx, "outsider", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	want(t, r.seen, "remove kvrouter/outsider")

	// The Role reads pods and does nothing else.
	sa := api.Client(t, token)
	if _, err := sa.CoreV1().Pods("elsewhere").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount lists pods in another namespace: %v, want Forbidden", err)
	}
	if err := sa.CoreV1().Pods(testNamespace).Delete(ctx, "a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount deletes a pod: %v, want Forbidden", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	select {
	case extra := <-r.seen:
		t.Errorf("unexpected consumer call %q", extra)
	default:
	}
}

func selected() map[string]string { return map[string]string{"kvrouter.io/pool": "default"} }

func create(t *testing.T, c *kubernetes.Clientset, ns, name string, labels map[string]string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}
	if _, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setStatus does what the kubelet would: the pod runs at ip, ready or not.
func setStatus(t *testing.T, c *kubernetes.Clientset, ns, name, ip string, ready bool) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if p, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}
