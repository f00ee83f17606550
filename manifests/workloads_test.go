package manifests

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kvrouter/kvrouter/kvevents/discovery"
)

var varRef = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

// expand substitutes $(VAR) in a container's args as the kubelet does, from
// its env literals and the ConfigMaps it draws from; an undefined variable
// fails the test.
func expand(t *testing.T, o objects, c corev1.Container) []string {
	t.Helper()
	vars := map[string]string{}
	byName := map[string]*corev1.ConfigMap{}
	for _, cm := range o.configMaps {
		byName[cm.Name] = cm
	}
	for _, e := range c.EnvFrom {
		cm := byName[e.ConfigMapRef.Name]
		if cm == nil {
			t.Fatalf("container %s: envFrom ConfigMap %s does not exist", c.Name, e.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			vars[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := byName[ref.Name]
			if cm == nil {
				t.Fatalf("container %s: env %s: ConfigMap %s does not exist", c.Name, e.Name, ref.Name)
			}
			vars[e.Name] = cm.Data[ref.Key]
		case e.ValueFrom.FieldRef != nil:
			vars[e.Name] = "<" + e.ValueFrom.FieldRef.FieldPath + ">"
		}
	}
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok {
				t.Errorf("container %s: arg %q uses undefined $(%s)", c.Name, a, name)
			}
			return v
		})
	}
	return out
}

func port(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func TestRouterDeployment(t *testing.T) {
	o := build(t)
	d := o.deployments["kvrouter"]
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case d.Spec.Replicas == nil || *d.Spec.Replicas != 2:
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	case spec.ServiceAccountName != "kvrouter":
		t.Errorf("serviceAccountName = %q, want kvrouter", spec.ServiceAccountName)
	case spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot:
		t.Errorf("pod securityContext = %+v, want runAsNonRoot", spec.SecurityContext)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("container securityContext = %+v, want a read-only root, no privilege escalation, no capabilities", sc)
	case c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero():
		t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", c.Resources)
	case port(c, "grpc") != 9002 || port(c, "admin") != 9090:
		t.Errorf("ports = %+v, want grpc 9002 and admin 9090", c.Ports)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "admin" {
			t.Errorf("probe %+v, want GET %s on the admin port", p.probe, p.path)
		}
	}
	args := expand(t, o, c)
	for _, want := range []string{"serve", "--grpc-addr=:9002", "--admin-addr=:9090", "--namespace=<metadata.namespace>", "--selector=kvrouter.io/pool=default", "--hash-algo=sha256", "--hash-seed=0", "--block-size=16"} {
		if !slices.Contains(args, want) {
			t.Errorf("kvrouter args %q lack %s", args, want)
		}
	}
	svc := o.services["kvrouter"]
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service kvrouter clusterIP = %q, want headless for Envoy's STRICT_DNS", svc.Spec.ClusterIP)
	}
	for _, p := range svc.Spec.Ports {
		if port(c, p.TargetPort.String()) != p.Port {
			t.Errorf("Service kvrouter port %+v does not reach a container port of the same number", p)
		}
	}
}

// TestVLLMDeployment checks the sample vLLM pods are what discovery and the
// hash chain need: selected, annotated, publishing events, seeded alike.
func TestVLLMDeployment(t *testing.T) {
	o := build(t)
	cfg := o.configMaps["kvrouter-config"]
	tmpl := o.deployments["vllm-qwen3"].Spec.Template
	sel, err := labels.Parse(cfg.Data["SELECTOR"])
	if err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
		t.Errorf("vLLM pod labels %v do not match kvrouter's selector %q (%v)", tmpl.Labels, cfg.Data["SELECTOR"], err)
	}
	known := []string{discovery.AnnotationModel, discovery.AnnotationServedNames, discovery.AnnotationLoRAs, discovery.AnnotationPort, discovery.AnnotationEventPort, discovery.AnnotationReplayPort, discovery.AnnotationDPSize}
	for k := range tmpl.Annotations {
		if strings.HasPrefix(k, "kvrouter.io/") && !slices.Contains(known, k) {
			t.Errorf("vLLM annotation %s is not one discovery reads", k)
		}
	}
	c := tmpl.Spec.Containers[0]
	args := expand(t, o, c)
	if tmpl.Annotations[discovery.AnnotationModel] != args[0] {
		t.Errorf("kvrouter.io/model = %q, want the served model %q", tmpl.Annotations[discovery.AnnotationModel], args[0])
	}
	i := slices.Index(args, "--kv-events-config")
	if i < 0 || i+1 == len(args) || args[i+1] != `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}` {
		t.Errorf("vLLM args %q: want --kv-events-config with PUB tcp://*:5557 and replay tcp://*:5558", args)
	}
	for _, want := range []string{"--enable-prefix-caching", "--prefix-caching-hash-algo=" + cfg.Data["HASH_ALGO"], "--block-size=" + cfg.Data["BLOCK_SIZE"]} {
		if !slices.Contains(args, want) {
			t.Errorf("vLLM args %q lack %s", args, want)
		}
	}
	var seed *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "PYTHONHASHSEED" {
			seed = &c.Env[i]
		}
	}
	if seed == nil || seed.ValueFrom == nil || seed.ValueFrom.ConfigMapKeyRef == nil ||
		seed.ValueFrom.ConfigMapKeyRef.Name != cfg.Name || seed.ValueFrom.ConfigMapKeyRef.Key != "HASH_SEED" {
		t.Errorf("PYTHONHASHSEED = %+v, want it from %s key HASH_SEED (kvrouter's --hash-seed)", seed, cfg.Name)
	}
	if port(c, discovery.ServingPortName) != 8000 || port(c, "kv-events") != 5557 || port(c, "kv-replay") != 5558 {
		t.Errorf("vLLM ports = %+v, want http 8000, kv-events 5557, kv-replay 5558", c.Ports)
	}
	if tmpl.Annotations[discovery.AnnotationEventPort] != "5557" || tmpl.Annotations[discovery.AnnotationReplayPort] != "5558" {
		t.Errorf("event port annotations = %v, want 5557 and 5558", tmpl.Annotations)
	}
}

// TestEnvoy checks Envoy's Kubernetes configuration is envoy/envoy.yaml
// except for the kvrouter cluster, which resolves the headless Service and
// speaks TLS to it (envoy_test.go checks the result is a valid bootstrap).
func TestEnvoy(t *testing.T) {
	o := build(t)
	local, err := os.ReadFile("../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm := o.configMaps["envoy-config"]
	var want, got map[string]any
	if err := yaml.Unmarshal(local, &want); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(cm.Data["envoy.yaml"]), &got); err != nil {
		t.Fatal(err)
	}
	svc := o.services["kvrouter"]
	for _, c := range want["static_resources"].(map[string]any)["clusters"].([]any) {
		c := c.(map[string]any)
		if c["name"] != "kvrouter" {
			continue
		}
		c["type"], c["dns_lookup_family"] = "STRICT_DNS", "V4_ONLY"
		c["transport_socket"] = map[string]any{"name": "envoy.transport_sockets.tls", "typed_config": map[string]any{
			"@type":              "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
			"common_tls_context": map[string]any{"alpn_protocols": []any{"h2"}},
		}}
		ep := c["load_assignment"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["lb_endpoints"].([]any)[0].(map[string]any)
		sa := ep["endpoint"].(map[string]any)["address"].(map[string]any)["socket_address"].(map[string]any)
		sa["address"], sa["port_value"] = svc.Name+"."+svc.Namespace+".svc.cluster.local", int(svc.Spec.Ports[0].Port)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("manifests/envoy.yaml differs from envoy/envoy.yaml beyond the kvrouter cluster:\n got %v\nwant %v", got, want)
	}
	d := o.deployments["envoy"].Spec.Template.Spec
	if d.Volumes[0].ConfigMap == nil || d.Volumes[0].ConfigMap.Name != cm.Name {
		t.Errorf("Envoy volume %+v, want ConfigMap %s", d.Volumes[0], cm.Name)
	}
	c := d.Containers[0]
	if !slices.Equal(c.Args[:2], []string{"-c", "/etc/envoy/envoy.yaml"}) || port(c, "http") != 8081 {
		t.Errorf("Envoy container = %v %+v, want -c /etc/envoy/envoy.yaml listening on 8081", c.Args, c.Ports)
	}
	if sc := d.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("Envoy pod securityContext = %+v, want runAsNonRoot", sc)
	}
}

// TestSharedTokenizerFiles: kvrouter and the vLLM pods share what makes
// their prompts equal: one Hugging Face cache volume (kvrouter's hf_cache
// at its mount, the pods' HF_HUB_CACHE at theirs), one hub token Secret,
// and one chat template, the same ConfigMap key for the pods'
// --chat-template and kvrouter's chat_template.
func TestSharedTokenizerFiles(t *testing.T) {
	o := build(t)
	router, pods := o.deployments["kvrouter"].Spec.Template.Spec, o.deployments["vllm-qwen3"].Spec.Template.Spec
	if o.claims["hf-cache"] == nil || !slices.Contains(o.claims["hf-cache"].Spec.AccessModes, corev1.ReadWriteMany) {
		t.Fatalf("PersistentVolumeClaim hf-cache = %+v, want ReadWriteMany: every pod mounts it", o.claims["hf-cache"])
	}
	var serve struct {
		Tokenizers struct {
			HFCache string `yaml:"hf_cache"`
			Models  map[string]struct {
				ChatTemplate string `yaml:"chat_template"`
			} `yaml:"models"`
		} `yaml:"tokenizers"`
	}
	if err := yaml.Unmarshal([]byte(o.configMaps["kvrouter-serve"].Data["kvrouter.yaml"]), &serve); err != nil {
		t.Fatal(err)
	}
	rc, pc := router.Containers[0], pods.Containers[0]
	if got := mountOf(router, rc, "hf-cache"); got == nil || got.ClaimName != "hf-cache" || got.path != serve.Tokenizers.HFCache || got.readOnly {
		t.Errorf("kvrouter's hf-cache mount = %+v, want the claim hf-cache, writable, at hf_cache %q", got, serve.Tokenizers.HFCache)
	}
	if got := mountOf(pods, pc, "hf-cache"); got == nil || got.ClaimName != "hf-cache" || got.path != envValue(pc, "HF_HUB_CACHE") {
		t.Errorf("vLLM's hf-cache mount = %+v, want the claim hf-cache at HF_HUB_CACHE %q", got, envValue(pc, "HF_HUB_CACHE"))
	}
	for _, c := range []corev1.Container{rc, pc} {
		ref := envSecret(c, "HF_TOKEN")
		if ref == nil || ref.Name != "hf-token" || ref.Key != "token" || ref.Optional == nil || !*ref.Optional {
			t.Errorf("container %s: HF_TOKEN = %+v, want the optional Secret hf-token, key token", c.Name, ref)
		}
	}
	model := pc.Args[0]
	routerTemplate := serve.Tokenizers.Models[model].ChatTemplate
	var podTemplate string
	for _, a := range expand(t, o, pc) {
		if v, ok := strings.CutPrefix(a, "--chat-template="); ok {
			podTemplate = v
		}
	}
	rm, pm := templateKey(router, rc, routerTemplate), templateKey(pods, pc, podTemplate)
	if rm == "" || rm != pm {
		t.Errorf("chat templates: kvrouter's %q is %q, the pods' %q is %q: want one ConfigMap key", routerTemplate, rm, podTemplate, pm)
	}
}

// mounted is a PersistentVolumeClaim volume as a container mounts it.
type mounted struct {
	corev1.PersistentVolumeClaimVolumeSource
	path     string
	readOnly bool
}

// mountOf returns how c mounts the claim volume name of spec, or nil.
func mountOf(spec corev1.PodSpec, c corev1.Container, name string) *mounted {
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if m.Name == name && v.Name == name && v.PersistentVolumeClaim != nil {
				return &mounted{*v.PersistentVolumeClaim, m.MountPath, m.ReadOnly}
			}
		}
	}
	return nil
}

// templateKey names the ConfigMap key a file path of c reads:
// "CONFIGMAP/KEY", or "" when no ConfigMap volume holds it.
func templateKey(spec corev1.PodSpec, c corev1.Container, path string) string {
	dir, key := path[:strings.LastIndex(path, "/")], path[strings.LastIndex(path, "/")+1:]
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if m.Name == v.Name && m.MountPath == dir && v.ConfigMap != nil {
				return v.ConfigMap.Name + "/" + key
			}
		}
	}
	return ""
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func envSecret(c corev1.Container, name string) *corev1.SecretKeySelector {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}
