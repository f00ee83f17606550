package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
	"github.com/kvrouter/kvrouter/internal/fixture/prometheus"
	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
)

const monitoringFiles = "../manifests/charts/kvrouter/files/"

// TestPrometheusE2E: a real Prometheus scrapes a running kvrouter, with the
// admin auth it needs (a bearer token the API server reviews), while kvrouter
// serves an InferencePool of a real kube-apiserver (with a sheddable
// InferenceObjective), two simulated pods of a pods file, a tokenizer,
// ext_proc over TLS and the index shared through Redis; after a short
// workload every query of the shipped dashboard returns data, and every
// series every shipped alert reads exists.
func TestPrometheusE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver, redis-server, Prometheus and kvrouter")
	}
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	ctx := t.Context()
	api.CreateNamespace(t, "llm")
	create := func(res interface {
		Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
	}, y string,
	) {
		t.Helper()
		var obj map[string]any
		if err := sigsyaml.Unmarshal([]byte(y), &obj); err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(api.InstallInferencePoolCRD(t, "llm"), `
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: qwen, namespace: llm}
spec:
  selector: {matchLabels: {app: vllm}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {kind: Service, name: kvrouter, port: {number: 9002}}
`)
	create(api.InstallInferenceObjectiveCRD(t, "llm"), `
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: batch, namespace: llm}
spec: {priority: -1, poolRef: {group: inference.networking.k8s.io, name: qwen}}
`)
	redis := redisserver.New(t)
	f := startFleetWith(t, fleetOptions{pods: 2})
	var pods strings.Builder
	pods.WriteString("pods:\n")
	for _, name := range []string{"sim-0", "sim-1"} {
		sim := f.sims[name]
		fmt.Fprintf(&pods, "- {name: %s, address: %s, model: qwen3, event_port: %d, replay_port: %d}\n",
			name, f.pods[name], port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint()))
	}
	podsFile := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(podsFile, []byte(pods.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	kv := startKVRouter(t, buildKVRouter(t), "--model", "qwen3="+qwen3Dir(t), "--pods-file", podsFile,
		"--kubeconfig", api.Kubeconfig(t, kubeapi.AdminToken), "--pool-name", "qwen", "--pool-namespace", "llm",
		"--index-backend", "redis", "--index-redis-addr", redis.Addr)
	if !poll(func() bool { return kv.ready(t) }) {
		t.Fatal("kvrouter never became ready")
	}
	// /metrics asks for a token now: only Prometheus, with one, reads it.
	prom := prometheus.Start(t, kubeapi.AdminToken, kv.admin)
	if !poll(func() bool { return prom.Query(t, "kvrouter_index_redis_leases == 2") == 1 }) {
		t.Fatalf("kvrouter never the writer of both pods (up: %d series)", prom.Query(t, "up == 1"))
	}
	for i := range 12 {
		body := prompt(restartTopics[i%3], fmt.Sprintf("Question %d?", i))
		res, err := kv.envoy.Do(ctx, envoyclient.Request{Path: "/v1/completions", Body: []byte(body)})
		if err != nil || res.Status != 200 {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
		if err := postTo(&http.Client{Timeout: time.Minute}, res.Destination, res.UpstreamBody); err != nil {
			t.Fatal(err)
		}
	}
	// Scraped with the admin token: up, and the workload's decisions seen.
	if !poll(func() bool { return prom.Query(t, `kvrouter_router_prompt_blocks_total{model="qwen3"} > 0`) == 1 }) {
		t.Fatalf("Prometheus never scraped kvrouter's decisions (up: %d series)", prom.Query(t, "up == 1"))
	}
	time.Sleep(3 * time.Second) // a few more scrapes, for rates over them

	for _, q := range dashboardQueries(t) {
		if !poll(func() bool { return prom.Query(t, q) > 0 }) {
			t.Errorf("the dashboard's query returns no data:\n%s", q)
		}
	}
	for alert, sels := range alertSelectors(t) {
		for _, sel := range sels {
			if prom.Query(t, "count("+sel+")") == 0 {
				t.Errorf("alert %s reads %s, of which kvrouter exports no series", alert, sel)
			}
		}
	}
}

// dashboardQueries are the shipped dashboard's panel queries with its
// variables given values: every replica and model, 30 s windows.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(monitoringFiles + "dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "30s", `"$instance"`, `".*"`, `"$model"`, `".*"`)
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, vars.Replace(tg.Expr))
		}
	}
	if len(out) < 20 {
		t.Fatalf("%d dashboard queries", len(out))
	}
	return out
}

var selector = regexp.MustCompile(`kvrouter_[a-z_]+(\{[^}]*\})?`)

// alertSelectors are the series selectors of each shipped alert.
func alertSelectors(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range prometheus.Rules(t, monitoringFiles+"alerts.yaml") {
		out[r.Alert] = selector.FindAllString(r.Expr, -1)
	}
	if len(out) < 15 {
		t.Fatalf("%d alerts", len(out))
	}
	return out
}
