package kubeauth

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

const ns = "monitoring"

// account creates a ServiceAccount, binds it to the ClusterRole role when
// role is not "", and returns a token for it.
func account(t *testing.T, c kubernetes.Interface, name string, role string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if role != "" {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// manifestClusterRoles creates the ClusterRoles of manifests/rbac.yaml, so
// the test proves the deployed permissions suffice.
func manifestClusterRoles(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	b, err := os.ReadFile("../../manifests/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind != "ClusterRole" {
			continue
		}
		if _, err := c.RbacV1().ClusterRoles().Create(t.Context(), &r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("manifests/rbac.yaml has %d ClusterRoles, want kvrouter-auth and kvrouter-metrics-reader", n)
	}
}

// TestAuthorizerOnRealAPIServer guards /metrics with a real kube-apiserver:
// kvrouter's ServiceAccount may only review tokens and access; a scraper
// bound to a metrics-reader role gets through, another account gets 403, no
// token or a bad one 401, and the scraper has no access beyond /metrics.
func TestAuthorizerOnRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	admin := api.Admin
	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manifestClusterRoles(t, admin) // kvrouter-auth and kvrouter-metrics-reader, as deployed
	self := account(t, admin, "kvrouter", "kvrouter-auth")
	scraper := account(t, admin, "prometheus", "kvrouter-metrics-reader")
	other := account(t, admin, "someone", "")

	reg := prometheus.NewRegistry()
	a, err := New(api.Client(t, self), slog.New(slog.NewTextHandler(t.Output(), nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("figures")) })))
	defer srv.Close()
	get := func(path, token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		who, path, token string
		want             int
	}{
		{"the scraper", "/metrics", scraper, http.StatusOK},
		{"the scraper again (cached)", "/metrics", scraper, http.StatusOK},
		{"the scraper beyond /metrics", "/debug/pods", scraper, http.StatusForbidden},
		{"another account", "/metrics", other, http.StatusForbidden},
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"a bad token", "/metrics", "not-a-token", http.StatusUnauthorized},
		{"kvrouter itself", "/metrics", self, http.StatusForbidden},
	} {
		if got := get(tt.path, tt.token); got != tt.want {
			t.Errorf("%s: GET %s = %d, want %d", tt.who, tt.path, got, tt.want)
		}
	}
	if got := testutil.ToFloat64(a.checks.WithLabelValues(Allowed)); got != 2 {
		t.Errorf("auth_total{allowed} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(a.checks.WithLabelValues(Failed)); got != 0 {
		t.Errorf("auth_total{error} = %v, want 0: the delegator role lets kvrouter review", got)
	}
}
