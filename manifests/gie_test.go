package manifests

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	giev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

// The Gateway API objects of the overlay, as far as the checks below read
// them (TestGIEPoolSchema decodes them into the Gateway API's own types and
// validates them against its CRDs).
type (
	gateway struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       struct {
			GatewayClassName string `json:"gatewayClassName"`
			Listeners        []struct {
				Name     string `json:"name"`
				Protocol string `json:"protocol"`
				Port     int32  `json:"port"`
			} `json:"listeners"`
		} `json:"spec"`
	}
	httpRoute struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       struct {
			ParentRefs []objectRef `json:"parentRefs"`
			Rules      []struct {
				Matches []struct {
					Path struct {
						Type  string `json:"type"`
						Value string `json:"value"`
					} `json:"path"`
				} `json:"matches"`
				BackendRefs []objectRef `json:"backendRefs"`
				Timeouts    struct {
					Request string `json:"request"`
				} `json:"timeouts"`
			} `json:"rules"`
		} `json:"spec"`
	}
	objectRef struct {
		Group string `json:"group"`
		Kind  string `json:"kind"`
		Name  string `json:"name"`
	}
)

// gieObjects is the gie overlay, built and decoded strictly.
type gieObjects struct {
	yaml        map[string][]byte // by kind/name
	pools       map[string]*giev1.InferencePool
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	roles       map[string]*rbacv1.Role
	bindings    map[string]*rbacv1.RoleBinding
	gateways    map[string]*gateway
	routes      map[string]*httpRoute
	objectives  map[string]*giev1alpha2.InferenceObjective
}

func buildGIE(t *testing.T) gieObjects {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../manifests-gie")
	if err != nil {
		t.Fatalf("kustomize build ../manifests-gie: %v", err)
	}
	o := gieObjects{
		yaml: map[string][]byte{}, pools: map[string]*giev1.InferencePool{}, deployments: map[string]*appsv1.Deployment{},
		services: map[string]*corev1.Service{}, roles: map[string]*rbacv1.Role{}, bindings: map[string]*rbacv1.RoleBinding{},
		gateways: map[string]*gateway{}, routes: map[string]*httpRoute{}, objectives: map[string]*giev1alpha2.InferenceObjective{},
	}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		kind, name := r.GetKind(), r.GetName()
		o.yaml[kind+"/"+name] = y
		switch kind {
		case "InferencePool":
			decode(t, y, o.pools, name)
		case "Deployment":
			decode(t, y, o.deployments, name)
		case "Service":
			decode(t, y, o.services, name)
		case "Role":
			decode(t, y, o.roles, name)
		case "RoleBinding":
			decode(t, y, o.bindings, name)
		case "Gateway":
			decode(t, y, o.gateways, name)
		case "HTTPRoute":
			decode(t, y, o.routes, name)
		case "InferenceObjective":
			decode(t, y, o.objectives, name)
		}
		if ns := r.GetNamespace(); ns != "kvrouter" && kind != "Namespace" && !strings.HasPrefix(kind, "Cluster") {
			t.Errorf("%s %s in namespace %q, want kvrouter", kind, name, ns)
		}
	}
	return o
}

// TestGIEOverlay checks the overlay's objects fit together: the pool selects
// the vLLM pods on their serving port and names kvrouter's Service as its
// picker, the route sends the Gateway's traffic to the pool, kvrouter serves
// the pool, and its Role reads pools and objectives.
func TestGIEOverlay(t *testing.T) {
	o := buildGIE(t)
	if _, ok := o.deployments["envoy"]; ok {
		t.Error("the gie overlay keeps the sample Envoy; the gateway replaces it")
	}
	pool := o.pools["vllm-qwen3"]
	if pool == nil {
		t.Fatalf("no InferencePool vllm-qwen3; objects: %v", slices.Sorted(mapKeys(o.yaml)))
	}
	if pool.APIVersion != "inference.networking.k8s.io/v1" {
		t.Errorf("pool apiVersion %q", pool.APIVersion)
	}
	vllm := o.deployments["vllm-qwen3"]
	set := labels.Set{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	if vllm == nil || !labels.SelectorFromSet(set).Matches(labels.Set(vllm.Spec.Template.Labels)) {
		t.Errorf("pool selector %v does not match the vLLM pods", set)
	} else if len(pool.Spec.TargetPorts) != 1 || int32(pool.Spec.TargetPorts[0].Number) != port(vllm.Spec.Template.Spec.Containers[0], "http") {
		t.Errorf("pool target ports %v, want the vLLM container's http port", pool.Spec.TargetPorts)
	}
	ref := pool.Spec.EndpointPickerRef
	svc := o.services["kvrouter"]
	if ref.Kind != "Service" || ref.Name != "kvrouter" || ref.Port == nil || ref.Port.Number != 9002 || svc == nil {
		t.Fatalf("endpointPickerRef %+v, want kvrouter's Service on 9002", ref)
	}
	var grpc *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == 9002 {
			grpc = &svc.Spec.Ports[i]
		}
	}
	if grpc == nil || grpc.AppProtocol == nil || *grpc.AppProtocol != "http2" {
		t.Errorf("kvrouter Service port 9002 = %+v, want appProtocol http2", grpc)
	}
	kv := o.deployments["kvrouter"]
	if kv == nil {
		t.Fatal("no kvrouter Deployment")
	}
	args := kv.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--pool-name="+pool.Name) || !slices.Contains(args, "--pool-namespace=$(POD_NAMESPACE)") {
		t.Errorf("kvrouter args %q, want --pool-name=%s and --pool-namespace", args, pool.Name)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--selector") || strings.HasPrefix(a, "--namespace") {
			t.Errorf("kvrouter args keep %q, which a pool replaces", a)
		}
	}

	route := o.routes["vllm-qwen3"]
	if route == nil || route.APIVersion != "gateway.networking.k8s.io/v1" || len(route.Spec.Rules) != 1 {
		t.Fatalf("HTTPRoute vllm-qwen3 = %+v", route)
	}
	if want := []objectRef{{Group: giev1.GroupName, Kind: "InferencePool", Name: pool.Name}}; !reflect.DeepEqual(route.Spec.Rules[0].BackendRefs, want) {
		t.Errorf("route backends %+v, want %+v", route.Spec.Rules[0].BackendRefs, want)
	}
	for _, p := range route.Spec.ParentRefs {
		if g := o.gateways[p.Name]; g == nil || p.Kind != "Gateway" || g.APIVersion != "gateway.networking.k8s.io/v1" {
			t.Errorf("route parent %+v is not the overlay's Gateway", p)
		}
	}
	if len(route.Spec.ParentRefs) == 0 {
		t.Error("route has no parent Gateway")
	}

	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"inference.networking.k8s.io"}, Resources: []string{"inferencepools"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"llm-d.ai", "inference.networking.x-k8s.io"}, Resources: []string{"inferenceobjectives"}, Verbs: []string{"get", "list", "watch"}},
	}
	if r := o.roles["kvrouter-gie"]; r == nil || !reflect.DeepEqual(r.Rules, want) {
		t.Errorf("Role kvrouter-gie = %+v, want exactly reading pools and objectives", r)
	}
	if b := o.bindings["kvrouter-gie"]; b == nil || b.RoleRef.Name != "kvrouter-gie" ||
		!reflect.DeepEqual(b.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kvrouter", Namespace: "kvrouter"}}) {
		t.Errorf("RoleBinding kvrouter-gie = %+v", b)
	}
	if len(o.objectives) < 2 {
		t.Errorf("%d InferenceObjectives, want samples with priority >= 0 and < 0", len(o.objectives))
	}
	var sheddable, kept bool
	for name, ob := range o.objectives {
		if ob.APIVersion != "inference.networking.x-k8s.io/v1alpha2" || ob.Spec.Priority == nil || string(ob.Spec.PoolRef.Name) != pool.Name {
			t.Errorf("InferenceObjective %s = %+v, want v1alpha2 with a priority, on the pool", name, ob)
			continue
		}
		sheddable = sheddable || *ob.Spec.Priority < 0
		kept = kept || *ob.Spec.Priority >= 0
	}
	if !sheddable || !kept {
		t.Error("the sample objectives want one sheddable (priority < 0) and one not")
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestGIEPoolSchema creates the overlay's InferencePool, InferenceObjectives,
// Gateway and HTTPRoute on a real kube-apiserver that has the GIE module's
// and the Gateway API module's CRDs, with strict field validation and dry
// run: the API server checks them against the CRDs' OpenAPI schemas and CEL
// rules.
func TestGIEPoolSchema(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	o := buildGIE(t)
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	if _, err := api.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvrouter"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := api.InstallInferencePoolCRD(t, "kvrouter")
	create := func(y []byte) error {
		var m map[string]any
		if err := sigsyaml.Unmarshal(y, &m); err != nil {
			t.Fatal(err)
		}
		_, err := pools.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		return err
	}
	y := o.yaml["InferencePool/vllm-qwen3"]
	if err := create(y); err != nil {
		t.Fatalf("the API server refuses the overlay's InferencePool: %v", err)
	}
	// The check bites: a field the schema lacks, and a port out of range.
	for what, bad := range map[string]string{
		"unknown field": strings.Replace(string(y), "targetPorts:", "targetPortz: []\n  targetPorts:", 1),
		"port 0":        strings.Replace(string(y), "number: 8000", "number: 0", 1),
	} {
		if err := create([]byte(bad)); err == nil {
			t.Errorf("the API server accepts the pool with %s:\n%s", what, bad)
		}
	}
	// The sample InferenceObjectives, against their CRD as the module ships it.
	objectives := api.InstallInferenceObjectiveCRD(t, "kvrouter")
	n := 0
	for key, y := range o.yaml {
		if !strings.HasPrefix(key, "InferenceObjective/") {
			continue
		}
		n++
		var m map[string]any
		if err := sigsyaml.Unmarshal(y, &m); err != nil {
			t.Fatal(err)
		}
		if _, err := objectives.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("the API server refuses the overlay's %s: %v", key, err)
		}
	}
	if n == 0 {
		t.Error("the overlay has no InferenceObjective to check")
	}
	// The Gateway and the HTTPRoute: strictly into the Gateway API's own
	// types, and against its standard CRDs.
	gateways, routes := api.InstallGatewayAPICRDs(t, "kvrouter")
	for key, check := range map[string]struct {
		into any
		res  dynamic.ResourceInterface
	}{
		"Gateway/inference-gateway": {&gatewayv1.Gateway{}, gateways},
		"HTTPRoute/vllm-qwen3":      {&gatewayv1.HTTPRoute{}, routes},
	} {
		y, ok := o.yaml[key]
		if !ok {
			t.Errorf("the overlay has no %s", key)
			continue
		}
		if err := sigsyaml.UnmarshalStrict(y, check.into); err != nil {
			t.Errorf("%s does not decode into the Gateway API's type: %v", key, err)
		}
		var m map[string]any
		if err := sigsyaml.Unmarshal(y, &m); err != nil {
			t.Fatal(err)
		}
		if _, err := check.res.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("the API server refuses the overlay's %s: %v", key, err)
		}
	}
}
