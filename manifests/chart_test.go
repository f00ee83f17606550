package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/helm"
	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

const chartDir = "charts/kvrouter"

// chartObject is one object helm rendered: its YAML and its fields.
type chartObject struct {
	yaml []byte
	*unstructured.Unstructured
}

// renderChart renders the chart as release in namespace with the extra
// arguments (-f FILE, --set ...).
func renderChart(t *testing.T, release, namespace string, args ...string) []chartObject {
	t.Helper()
	return objectsOf(t, helm.Template(t, chartDir, release, namespace, args...))
}

func objectsOf(t *testing.T, docs [][]byte) []chartObject {
	t.Helper()
	objs := make([]chartObject, 0, len(docs))
	for _, doc := range docs {
		var m map[string]any
		if err := sigsyaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, chartObject{doc, &unstructured.Unstructured{Object: m}})
	}
	return objs
}

// find returns the object of kind and name, or nil.
func find(objs []chartObject, kind, name string) *chartObject {
	for i := range objs {
		if objs[i].GetKind() == kind && objs[i].GetName() == name {
			return &objs[i]
		}
	}
	return nil
}

// typed decodes an object strictly into its Kubernetes type.
func typed[T any](t *testing.T, o *chartObject) *T {
	t.Helper()
	if o == nil {
		t.Fatalf("no such object")
	}
	v := new(T)
	if err := sigsyaml.UnmarshalStrict(o.yaml, v); err != nil {
		t.Fatalf("decode %s %s: %v\n%s", o.GetKind(), o.GetName(), err, o.yaml)
	}
	return v
}

// chartShapes are the chart's value files of its shapes (ci/*-values.yaml),
// by name, with "default" for the chart's own defaults.
func chartShapes(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("the chart's shapes: %v %v", files, err)
	}
	shapes := map[string][]string{"default": nil}
	for _, f := range files {
		shapes[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = []string{"-f", f}
	}
	return shapes
}

// builtin decodes every object of a kind Kubernetes itself serves strictly
// into its type: an unknown or misplaced field fails.
func builtin(t *testing.T, objs []chartObject) {
	t.Helper()
	decoders := map[string]func(*chartObject){
		"Deployment":              func(o *chartObject) { typed[appsv1.Deployment](t, o) },
		"Service":                 func(o *chartObject) { typed[corev1.Service](t, o) },
		"ConfigMap":               func(o *chartObject) { typed[corev1.ConfigMap](t, o) },
		"ServiceAccount":          func(o *chartObject) { typed[corev1.ServiceAccount](t, o) },
		"PersistentVolumeClaim":   func(o *chartObject) { typed[corev1.PersistentVolumeClaim](t, o) },
		"Role":                    func(o *chartObject) { typed[rbacv1.Role](t, o) },
		"RoleBinding":             func(o *chartObject) { typed[rbacv1.RoleBinding](t, o) },
		"ClusterRole":             func(o *chartObject) { typed[rbacv1.ClusterRole](t, o) },
		"ClusterRoleBinding":      func(o *chartObject) { typed[rbacv1.ClusterRoleBinding](t, o) },
		"PodDisruptionBudget":     func(o *chartObject) { typed[policyv1.PodDisruptionBudget](t, o) },
		"NetworkPolicy":           func(o *chartObject) { typed[networkingv1.NetworkPolicy](t, o) },
		"HorizontalPodAutoscaler": func(o *chartObject) { typed[autoscalingv2.HorizontalPodAutoscaler](t, o) },
	}
	for i := range objs {
		if d := decoders[objs[i].GetKind()]; d != nil {
			d(&objs[i])
		}
	}
}

// TestChartShapes lints and renders every shape of the chart, decodes the
// objects strictly, and creates each with a server-side dry run and strict
// field validation on a real kube-apiserver that has the CRDs of GIE, the
// Gateway API, llm-d's objectives, prometheus-operator (ServiceMonitor,
// PrometheusRule) and KEDA: the API
// server checks every object against its schema and validation rules.
func TestChartShapes(t *testing.T) {
	shapes := chartShapes(t)
	rendered := map[string][]chartObject{}
	for name, args := range shapes {
		helm.Must(t, append([]string{"lint", "--strict", chartDir, "--namespace", "shape-" + name}, args...)...)
		objs := renderChart(t, "kv-"+name, "shape-"+name, args...)
		builtin(t, objs)
		if find(objs, "Deployment", "kv-"+name+"-kvrouter") == nil {
			t.Errorf("shape %s renders no kvrouter Deployment", name)
		}
		rendered[name] = objs
	}
	if testing.Short() {
		t.Skip("the server-side dry run starts etcd and kube-apiserver")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b"} {
		api.CreateNamespace(t, ns)
	}
	api.InstallInferencePoolCRD(t, "default")
	api.InstallInferenceObjectiveCRD(t, "default")
	api.InstallLLMDObjectiveCRD(t, "default")
	api.InstallGatewayAPICRDs(t, "default")
	for _, crd := range []struct {
		module, file string
		served       schema.GroupVersionResource
	}{
		{
			helm.CRDModules.PrometheusOperator, "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
			schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"},
		},
		{
			helm.CRDModules.PrometheusOperator, "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
			schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"},
		},
		{
			helm.CRDModules.KEDA, "config/crd/bases/keda.sh_scaledobjects.yaml",
			schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"},
		},
	} {
		doc, err := os.ReadFile(filepath.Join(helm.ModuleDir(t, crd.module), filepath.FromSlash(crd.file)))
		if err != nil {
			t.Fatal(err)
		}
		api.InstallCRD(t, doc, crd.served, "default")
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(api.RESTConfig(kubeapi.AdminToken))))
	dyn := api.Dynamic(t)
	kinds := map[string]bool{}
	for name, objs := range rendered {
		api.CreateNamespace(t, "shape-"+name)
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Errorf("shape %s: %s %s: the API server does not serve it: %v", name, gvk, o.GetName(), err)
				continue
			}
			res := dyn.Resource(m.Resource)
			var err2 error
			if ns := o.GetNamespace(); m.Scope.Name() == "namespace" {
				if ns == "" {
					ns = "shape-" + name
				}
				_, err2 = res.Namespace(ns).Create(ctx, o.Unstructured, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			} else {
				_, err2 = res.Create(ctx, o.Unstructured, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			}
			if err2 != nil {
				t.Errorf("shape %s: the API server refuses %s %s: %v", name, gvk.Kind, o.GetName(), err2)
			}
			kinds[gvk.Kind] = true
		}
	}
	for _, k := range []string{"InferencePool", "InferenceObjective", "HTTPRoute", "ServiceMonitor", "PrometheusRule", "ScaledObject", "HorizontalPodAutoscaler", "NetworkPolicy", "PodDisruptionBudget"} {
		if !kinds[k] {
			t.Errorf("no shape renders a %s: the dry run checks none", k)
		}
	}
}

// TestChartSchema: a wrong value fails at render, before anything is
// applied, with a message that names it.
func TestChartSchema(t *testing.T) {
	for _, c := range []struct {
		set  []string
		says string
	}{
		{[]string{"--set", "replicas=-1"}, "/replicas"},
		{[]string{"--set", "replica=2"}, "'replica' not allowed"},
		{[]string{"--set", "tls.mode=strict"}, "/tls/mode"},
		{[]string{"--set", "config.hash.algorithm=md5"}, "/config/hash/algorithm"},
		{[]string{"--set", "config.routing.scale_from_zero_wait=1m"}, "/config/routing/scale_from_zero_wait"},
		{[]string{"--set", "pool.name=Bad_Name"}, "/pool/name"},
		{[]string{"--set", "pool.objectiveGroup=example.com"}, "/pool/objectiveGroup"},
		{[]string{"--set", "redis.enabled=yes"}, "/redis/enabled"},
		{[]string{"--set", "envoy.service.port=70000"}, "/envoy/service/port"},
		{[]string{"--set", "autoscaling.models[0].model=m"}, "/autoscaling/models/0"},
		// What the schema cannot say, the templates refuse by name.
		{[]string{"--set", "config.listen.grpc=:1"}, "config.listen is set by the chart"},
		{[]string{"--set", "config.index.backend=redis"}, "use redis.enabled"},
		{[]string{"--set", "tls.mode=secret"}, "tls.secretName"},
		{[]string{"--set", "pool.name=p", "--set", "pool.create=true"}, "pool.selector"},
		{[]string{"--set", "envoy.enabled=true", "--set", "config.routing.scale_from_zero_wait=300s"}, "envoy.idleTimeoutSeconds (300) must exceed"},
		{[]string{"--set", "autoscaling.keda.enabled=true"}, "autoscaling.models"},
	} {
		out, errOut, err := helm.Run(t, append([]string{"template", "kv", chartDir}, c.set...)...)
		if err == nil {
			t.Errorf("helm template %v succeeded, want it refused:\n%.300s", c.set, out)
			continue
		}
		if !strings.Contains(errOut, c.says) {
			t.Errorf("helm template %v says %q, want it to name %q", c.set, errOut, c.says)
		}
	}
}
