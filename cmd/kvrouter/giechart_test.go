package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/helm"
	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
)

// gieChart copies GIE v1.5.0's inferencepool chart and the epplib chart it
// depends on out of the module kvrouter builds with, and builds the
// dependency as helm does before an install.
func gieChart(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		t.Fatalf("go list the GIE module: %v", err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(strings.TrimSpace(string(out)), "config", "charts"))); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(dir, "inferencepool")
	helm.Must(t, "dependency", "build", chart)
	return chart
}

// documentedValues writes the values docs/operations.md gives for GIE's
// chart (the first yaml block of "In place of the picker") to a file.
func documentedValues(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### In place of the picker\n")
	_, block, ok2 := strings.Cut(section, "\n```yaml\n")
	block, _, ok3 := strings.Cut(block, "\n```\n")
	if !ok || !ok2 || !ok3 || !strings.Contains(block, "inferenceExtension:") {
		t.Fatal("docs/operations.md has no yaml block of GIE chart values under \"In place of the picker\"")
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(block+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestGIEChart renders GIE v1.5.0's inferencepool chart with kvrouter's image
// and the values docs/operations.md gives ("In place of the picker"), creates
// the InferencePool it renders on a real kube-apiserver with a ready pod the
// pool selects, and starts kvrouter with exactly the picker container's
// arguments, its config file from the chart's ConfigMap and $KUBECONFIG as
// the cluster: the chart's probes' gRPC health service answers SERVING once
// the pool's pod is known, and a request through ext_proc goes to that pod.
func TestGIEChart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	// The test's own ports, through the chart's flags map as a user would
	// set them: the machine runs other tests.
	grpcPort, healthPort, metricsPort := kubeapi.FreePort(t), kubeapi.FreePort(t), kubeapi.FreePort(t)
	docs := helm.Template(t, gieChart(t), "qwen", "llm", "-f", documentedValues(t),
		"--set", "inferenceExtension.flags.hub-offline=true", // no hub here: tokenizers are missing, requests routed by load
		"--set", "inferenceExtension.flags.grpc-port="+strconv.Itoa(grpcPort),
		"--set", "inferenceExtension.flags.grpc-health-port="+strconv.Itoa(healthPort),
		"--set", "inferenceExtension.flags.metrics-port="+strconv.Itoa(metricsPort))
	var (
		picker *corev1.Container
		config *corev1.ConfigMap
		pool   map[string]any
	)
	for _, doc := range docs {
		var meta struct{ Kind string }
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := sigsyaml.UnmarshalStrict(doc, &d); err != nil {
				t.Fatal(err)
			}
			for i, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "epp" {
					picker = &d.Spec.Template.Spec.Containers[i]
				}
			}
		case "ConfigMap":
			config = new(corev1.ConfigMap)
			if err := sigsyaml.UnmarshalStrict(doc, config); err != nil {
				t.Fatal(err)
			}
		case "InferencePool":
			if err := sigsyaml.Unmarshal(doc, &pool); err != nil {
				t.Fatal(err)
			}
		}
	}
	if picker == nil || config == nil || pool == nil {
		t.Fatalf("the chart rendered picker %v, ConfigMap %v, pool %v", picker != nil, config != nil, pool != nil)
	}
	if !strings.HasSuffix(picker.Image, "/kvrouter:VERSION") {
		t.Errorf("the picker's image = %q, want kvrouter's", picker.Image)
	}
	probe := picker.ReadinessProbe.GRPC
	if probe == nil || probe.Service == nil || picker.LivenessProbe.GRPC == nil {
		t.Fatalf("the chart's probes = %+v, %+v; want gRPC", picker.ReadinessProbe, picker.LivenessProbe)
	}
	// The chart mounts its ConfigMap at /config: the same files, here.
	configDir := t.TempDir()
	for name, data := range config.Data {
		if err := os.WriteFile(filepath.Join(configDir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := make([]string, len(picker.Args))
	for i, a := range picker.Args {
		args[i] = strings.Replace(a, "/config/", configDir+"/", 1)
	}
	t.Logf("the picker's arguments: %q", picker.Args)

	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	if _, err := api.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "llm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := api.InstallInferencePoolCRD(t, "llm")
	if _, err := pools.Create(ctx, &unstructured.Unstructured{Object: pool}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the chart's InferencePool: %v", err)
	}
	readyPod(t, api, "llm", "vllm-0", "10.255.255.9", map[string]string{"app": "vllm"})

	t.Setenv("KUBECONFIG", api.Kubeconfig(t, kubeapi.AdminToken))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(runCtx, args, io.Discard, pw); _ = pw.Close() }()
	urls := announced(t, pr, "admin server", "ext_proc gRPC server", "gRPC health server")
	if want := ":" + strconv.Itoa(healthPort); !strings.HasSuffix(urls["gRPC health server"], want) {
		t.Errorf("health server at %s, want the chart's health port %s", urls["gRPC health server"], want)
	}
	health, err := grpc.NewClient(strings.TrimPrefix(urls["gRPC health server"], "grpc://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = health.Close() }()
	hc := healthpb.NewHealthClient(health)
	for _, service := range []string{*probe.Service, *picker.LivenessProbe.GRPC.Service, "readiness", "liveness", ""} {
		waitFor(t, "health "+service+" SERVING", func() bool {
			res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
		})
	}
	code, body := get(t, urls["admin server"]+"/readyz")
	if code != http.StatusOK || !strings.Contains(body, "1 pod to route to") {
		t.Errorf("/readyz = %d %q, want ready with the pool's pod", code, body)
	}
	// The chart's default --secure-serving: TLS with a self-signed
	// certificate, which gateways do not verify.
	conn, err := grpc.NewClient(urls["ext_proc gRPC server"], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}))) //nolint:gosec // see above
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	res, err := envoyclient.New(conn).Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"Qwen/Qwen3-0.6B","prompt":"hello"}`)})
	if err != nil || res.Destination != "10.255.255.9:8000" {
		t.Errorf("a completion through ext_proc = %+v, %v; want routed to the pool's pod", res, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("kvrouter after cancel = %v, want nil", err)
	}
}
