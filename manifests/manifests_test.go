package manifests

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"
)

// objects is the built kustomization, decoded into typed structs.
type objects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap // by name without the hash suffix
	accounts    map[string]*corev1.ServiceAccount
	roles       map[string]*rbacv1.Role
	bindings    map[string]*rbacv1.RoleBinding
	namespaces  map[string]*corev1.Namespace
	claims      map[string]*corev1.PersistentVolumeClaim
	// Cluster-scoped: admin authorization.
	clusterRoles    map[string]*rbacv1.ClusterRole
	clusterBindings map[string]*rbacv1.ClusterRoleBinding
}

// build runs kustomize on this directory and decodes every object strictly
// (an unknown field fails) into its Kubernetes type.
func build(t *testing.T) objects {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	o := objects{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, accounts: map[string]*corev1.ServiceAccount{},
		roles: map[string]*rbacv1.Role{}, bindings: map[string]*rbacv1.RoleBinding{}, namespaces: map[string]*corev1.Namespace{},
		claims:       map[string]*corev1.PersistentVolumeClaim{},
		clusterRoles: map[string]*rbacv1.ClusterRole{}, clusterBindings: map[string]*rbacv1.ClusterRoleBinding{},
	}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		kind, name := r.GetKind(), r.GetName()
		clusterScoped := kind == "Namespace" || kind == "ClusterRole" || kind == "ClusterRoleBinding"
		if !clusterScoped && r.GetNamespace() != "kvrouter" {
			t.Errorf("%s %s is in namespace %q, want kvrouter", kind, name, r.GetNamespace())
		}
		var into any
		switch kind {
		case "Deployment":
			into = decode(t, y, o.deployments, name)
		case "Service":
			into = decode(t, y, o.services, name)
		case "ConfigMap":
			into = decode(t, y, o.configMaps, name[:strings.LastIndex(name, "-")])
		case "ServiceAccount":
			into = decode(t, y, o.accounts, name)
		case "Role":
			into = decode(t, y, o.roles, name)
		case "RoleBinding":
			into = decode(t, y, o.bindings, name)
		case "Namespace":
			into = decode(t, y, o.namespaces, name)
		case "PersistentVolumeClaim":
			into = decode(t, y, o.claims, name)
		case "ClusterRole":
			into = decode(t, y, o.clusterRoles, name)
		case "ClusterRoleBinding":
			into = decode(t, y, o.clusterBindings, name)
		}
		if into == nil {
			t.Errorf("unexpected %s %s", kind, name)
		}
	}
	return o
}

func decode[T any](t *testing.T, y []byte, into map[string]*T, name string) *T {
	t.Helper()
	v := new(T)
	if err := sigsyaml.UnmarshalStrict(y, v); err != nil {
		t.Errorf("decode %s: %v\n%s", name, err, y)
	}
	into[name] = v
	return v
}

func TestObjects(t *testing.T) {
	o := build(t)
	for kind, got := range map[string][]string{
		"Deployment": keys(o.deployments), "Service": keys(o.services), "ConfigMap": keys(o.configMaps),
		"ServiceAccount": keys(o.accounts), "Role": keys(o.roles), "RoleBinding": keys(o.bindings), "Namespace": keys(o.namespaces),
		"ClusterRole": keys(o.clusterRoles), "ClusterRoleBinding": keys(o.clusterBindings), "PersistentVolumeClaim": keys(o.claims),
	} {
		want := map[string][]string{
			"Deployment": {"envoy", "kvrouter", "vllm-qwen3"}, "Service": {"envoy", "kvrouter"},
			"ConfigMap": {"envoy-config", "kvrouter-config", "kvrouter-serve", "kvrouter-templates"}, "ServiceAccount": {"kvrouter"},
			"Role": {"kvrouter"}, "RoleBinding": {"kvrouter"}, "Namespace": {"kvrouter"},
			"ClusterRole": {"kvrouter-auth", "kvrouter-metrics-reader"}, "ClusterRoleBinding": {"kvrouter-auth"},
			"PersistentVolumeClaim": {"hf-cache"},
		}[kind]
		if !slices.Equal(got, want) {
			t.Errorf("%s objects = %q, want %q", kind, got, want)
		}
	}
}

func keys[T any](m map[string]*T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestRBAC(t *testing.T) {
	o := build(t)
	role := o.roles["kvrouter"]
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
	if role == nil || !reflect.DeepEqual(role.Rules, want) {
		t.Fatalf("Role kvrouter = %+v, want exactly get/list/watch on pods", role)
	}
	b := o.bindings["kvrouter"]
	if b == nil || b.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "kvrouter"}) ||
		!reflect.DeepEqual(b.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kvrouter", Namespace: "kvrouter"}}) {
		t.Errorf("RoleBinding kvrouter = %+v, want Role kvrouter bound to ServiceAccount kvrouter/kvrouter", b)
	}
	auth := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if cr := o.clusterRoles["kvrouter-auth"]; cr == nil || !reflect.DeepEqual(cr.Rules, auth) {
		t.Errorf("ClusterRole kvrouter-auth = %+v, want exactly creating token and access reviews", cr)
	}
	cb := o.clusterBindings["kvrouter-auth"]
	if cb == nil || cb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "kvrouter-auth"}) ||
		!reflect.DeepEqual(cb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kvrouter", Namespace: "kvrouter"}}) {
		t.Errorf("ClusterRoleBinding kvrouter-auth = %+v, want ClusterRole kvrouter-auth bound to ServiceAccount kvrouter/kvrouter", cb)
	}
	reader := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if cr := o.clusterRoles["kvrouter-metrics-reader"]; cr == nil || !reflect.DeepEqual(cr.Rules, reader) {
		t.Errorf("ClusterRole kvrouter-metrics-reader = %+v, want exactly get /metrics", cr)
	}
}
