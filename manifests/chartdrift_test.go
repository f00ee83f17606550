package manifests

import (
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomized builds the kustomization in dir into objects.
func kustomized(t *testing.T, dir string) []chartObject {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var docs [][]byte
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, y)
	}
	return objectsOf(t, docs)
}

// kustomizedConfigMap finds a generated ConfigMap by its name without the
// hash suffix.
func kustomizedConfigMap(objs []chartObject, name string) *chartObject {
	for i := range objs {
		if n := objs[i].GetName(); objs[i].GetKind() == "ConfigMap" && len(n) > len(name) && n[:len(name)+1] == name+"-" {
			return &objs[i]
		}
	}
	return nil
}

// sameField reports a difference between what the kustomize base and the
// chart render for one field of an object both have.
func sameField(t *testing.T, what string, base, chart any) {
	t.Helper()
	if !reflect.DeepEqual(base, chart) {
		t.Errorf("%s differs between the kustomize base and the chart:\n base  %+v\n chart %+v", what, base, chart)
	}
}

// samePod compares what must match in two pod templates: the pod's and
// each container's security, ports, probes, resources, arguments of
// containers that take no kvrouter settings, and where volumes are mounted.
func samePod(t *testing.T, what string, base, chart corev1.PodSpec, compareArgs bool) {
	t.Helper()
	sameField(t, what+" pod securityContext", base.SecurityContext, chart.SecurityContext)
	sameField(t, what+" terminationGracePeriodSeconds", base.TerminationGracePeriodSeconds, chart.TerminationGracePeriodSeconds)
	if len(base.Containers) != len(chart.Containers) {
		t.Fatalf("%s: %d containers in the base, %d in the chart", what, len(base.Containers), len(chart.Containers))
	}
	for i, b := range base.Containers {
		c := chart.Containers[i]
		sameField(t, what+" "+b.Name+" ports", b.Ports, c.Ports)
		sameField(t, what+" "+b.Name+" readinessProbe", b.ReadinessProbe, c.ReadinessProbe)
		sameField(t, what+" "+b.Name+" livenessProbe", b.LivenessProbe, c.LivenessProbe)
		sameField(t, what+" "+b.Name+" resources", b.Resources, c.Resources)
		sameField(t, what+" "+b.Name+" securityContext", b.SecurityContext, c.SecurityContext)
		if compareArgs {
			sameField(t, what+" "+b.Name+" args", b.Args, c.Args)
		}
		paths := func(ms []corev1.VolumeMount) []string {
			var out []string
			for _, m := range ms {
				out = append(out, m.MountPath)
			}
			slices.Sort(out)
			return out
		}
		sameField(t, what+" "+b.Name+" mount paths", paths(b.VolumeMounts), paths(c.VolumeMounts))
	}
}

// TestChartMatchesKustomize renders the chart in the shapes of the kustomize
// bases (manifests/, manifests-gie/, manifests-redis/) and compares the
// objects that must match, so that neither drifts from the other: the
// Deployments' pods, the Services' ports, every RBAC rule, Envoy's
// configuration (one file, files/envoy.yaml, used by both), the pool, its
// route and objectives, and the shared index's server. kvrouter's own
// settings are compared in cmd/kvrouter (TestChartConfig).
func TestChartMatchesKustomize(t *testing.T) {
	const ns = "kvrouter"
	template := []string{"--set-file", `tokenizers.chatTemplates.Qwen/Qwen3-0\.6B=templates/qwen3-tools.jinja`}
	t.Run("manifests", func(t *testing.T) {
		base := kustomized(t, ".")
		chart := renderChart(t, "kvrouter", ns, append([]string{"-f", chartDir + "/ci/kustomize-base-values.yaml"}, template...)...)
		bd, cd := typed[appsv1.Deployment](t, find(base, "Deployment", "kvrouter")), typed[appsv1.Deployment](t, find(chart, "Deployment", "kvrouter"))
		sameField(t, "kvrouter replicas", bd.Spec.Replicas, cd.Spec.Replicas)
		samePod(t, "kvrouter", bd.Spec.Template.Spec, cd.Spec.Template.Spec, false)
		for _, env := range []string{"GOMEMLIMIT", "HF_TOKEN"} {
			sameField(t, "kvrouter env "+env, envVar(bd.Spec.Template.Spec.Containers[0], env), envVar(cd.Spec.Template.Spec.Containers[0], env))
		}
		sameField(t, "the hf-cache volume", volume(bd.Spec.Template.Spec, "hf-cache"), volume(cd.Spec.Template.Spec, "hf-cache"))
		sameService(t, "kvrouter", find(base, "Service", "kvrouter"), find(chart, "Service", "kvrouter"))
		sameField(t, "Role kvrouter rules", typed[rbacv1.Role](t, find(base, "Role", "kvrouter")).Rules, typed[rbacv1.Role](t, find(chart, "Role", "kvrouter")).Rules)
		for _, name := range []string{"kvrouter-auth", "kvrouter-metrics-reader"} {
			sameField(t, "ClusterRole "+name+" rules", typed[rbacv1.ClusterRole](t, find(base, "ClusterRole", name)).Rules,
				typed[rbacv1.ClusterRole](t, find(chart, "ClusterRole", name)).Rules)
		}
		for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
			name := map[string]string{"RoleBinding": "kvrouter", "ClusterRoleBinding": "kvrouter-auth"}[kind]
			sameField(t, kind+" "+name+" subjects", find(base, kind, name).Object["subjects"], find(chart, kind, name).Object["subjects"])
		}
		// Envoy: the same configuration, byte for byte, and the same pod.
		benv := typed[corev1.ConfigMap](t, kustomizedConfigMap(base, "envoy-config")).Data["envoy.yaml"]
		cenv := typed[corev1.ConfigMap](t, find(chart, "ConfigMap", "kvrouter-envoy")).Data["envoy.yaml"]
		if benv != cenv {
			t.Errorf("Envoy's configuration differs between the kustomize base and the chart:\n--- base\n%s\n--- chart\n%s", benv, cenv)
		}
		samePod(t, "envoy", typed[appsv1.Deployment](t, find(base, "Deployment", "envoy")).Spec.Template.Spec,
			typed[appsv1.Deployment](t, find(chart, "Deployment", "kvrouter-envoy")).Spec.Template.Spec, true)
		sameField(t, "Envoy Service ports", typed[corev1.Service](t, find(base, "Service", "envoy")).Spec.Ports,
			typed[corev1.Service](t, find(chart, "Service", "kvrouter-envoy")).Spec.Ports)
	})
	t.Run("manifests-gie", func(t *testing.T) {
		base := kustomized(t, "../manifests-gie")
		chart := renderChart(t, "kvrouter", ns, "-f", chartDir+"/ci/pool-values.yaml", "--set", "pool.targetPorts={8000}",
			"--set", "pool.objectiveGroup=inference.networking.x-k8s.io")
		// The base splits kvrouter's rules over two Roles; the chart has one.
		var baseRules []rbacv1.PolicyRule
		for _, name := range []string{"kvrouter", "kvrouter-gie"} {
			baseRules = append(baseRules, typed[rbacv1.Role](t, find(base, "Role", name)).Rules...)
		}
		sameField(t, "the Roles' rules", baseRules, typed[rbacv1.Role](t, find(chart, "Role", "kvrouter")).Rules)
		for _, kind := range []string{"InferencePool", "HTTPRoute"} {
			sameField(t, kind+" spec", find(base, kind, "vllm-qwen3").Object["spec"], find(chart, kind, "vllm-qwen3").Object["spec"])
		}
		for _, name := range []string{"interactive", "batch"} {
			b, c := find(base, "InferenceObjective", name), find(chart, "InferenceObjective", name)
			sameField(t, "InferenceObjective "+name, []any{b.GetAPIVersion(), b.Object["spec"]}, []any{c.GetAPIVersion(), c.Object["spec"]})
		}
		sameService(t, "kvrouter", find(base, "Service", "kvrouter"), find(chart, "Service", "kvrouter"))
	})
	t.Run("manifests-redis", func(t *testing.T) {
		base := kustomized(t, "../manifests-redis")
		chart := renderChart(t, "kvrouter", ns, "-f", chartDir+"/ci/redis-deploy-values.yaml")
		samePod(t, "the index's server", typed[appsv1.Deployment](t, find(base, "Deployment", "kvrouter-redis")).Spec.Template.Spec,
			typed[appsv1.Deployment](t, find(chart, "Deployment", "kvrouter-redis")).Spec.Template.Spec, true)
		sameField(t, "the index's Service ports", typed[corev1.Service](t, find(base, "Service", "kvrouter-redis")).Spec.Ports,
			typed[corev1.Service](t, find(chart, "Service", "kvrouter-redis")).Spec.Ports)
		bp, cp := typed[networkingv1.NetworkPolicy](t, find(base, "NetworkPolicy", "kvrouter-redis")), typed[networkingv1.NetworkPolicy](t, find(chart, "NetworkPolicy", "kvrouter-redis"))
		sameField(t, "the index's NetworkPolicy ports", bp.Spec.Ingress[0].Ports, cp.Spec.Ingress[0].Ports)
	})
}

// sameService compares two Services' ports and cluster IP (the chart's
// selectors also name the release).
func sameService(t *testing.T, what string, base, chart *chartObject) {
	t.Helper()
	b, c := typed[corev1.Service](t, base).Spec, typed[corev1.Service](t, chart).Spec
	sameField(t, what+" Service ports", b.Ports, c.Ports)
	sameField(t, what+" Service clusterIP", b.ClusterIP, c.ClusterIP)
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for _, e := range c.Env {
		if e.Name == name {
			return &e
		}
	}
	return nil
}

func volume(spec corev1.PodSpec, name string) *corev1.VolumeSource {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return &v.VolumeSource
		}
	}
	return nil
}
