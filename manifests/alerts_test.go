package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/prometheus"
)

const (
	alertsFile     = chartDir + "/files/alerts.yaml"
	alertsTestFile = "../test/promtool/alerts_test.yaml"
	runbookPrefix  = "https://github.com/kvrouter/kvrouter/blob/main/docs/operations.md#"
)

// docAnchors returns the anchors of a Markdown file's headings, as GitHub
// makes them.
func docAnchors(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var anchors []string
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors = append(anchors, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-"))
		}
	}
	return anchors
}

// TestAlertRules: promtool accepts the rule file and its unit tests pass
// (each alert fires in its scenario, a healthy replica raises none); every
// alert has a severity, a summary and a runbook that is a section of
// docs/operations.md, and a scenario of its own in the unit tests.
func TestAlertRules(t *testing.T) {
	if out, err := prometheus.Promtool(t, "check", "rules", alertsFile); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := prometheus.Promtool(t, "test", "rules", alertsTestFile); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	rules := prometheus.Rules(t, alertsFile)
	var tests struct {
		Tests []struct {
			Name string `json:"name"`
		} `json:"tests"`
	}
	b, err := os.ReadFile(alertsTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	scenarios := map[string]bool{}
	for _, c := range tests.Tests {
		scenarios[c.Name] = true
	}
	anchors := docAnchors(t, "../docs/operations.md")
	for _, r := range rules {
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookPrefix)
		if !ok || anchor != strings.ToLower(r.Alert) || !slices.Contains(anchors, anchor) {
			t.Errorf("%s: runbook_url %q, want %s%s, a section of docs/operations.md", r.Alert, r.Annotations["runbook_url"], runbookPrefix, strings.ToLower(r.Alert))
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: no summary or description", r.Alert)
		}
		if !scenarios[r.Alert+" fires"] {
			t.Errorf("%s: no unit test %q in %s", r.Alert, r.Alert+" fires", alertsTestFile)
		}
	}
	if len(rules) < 15 {
		t.Errorf("%d alerts, want the runbook's", len(rules))
	}
}

// TestMonitoringManifests: the chart's PrometheusRule and the one of
// manifests-monitoring/ carry exactly the rule file's groups.
// KVROUTER_UPDATE_MANIFESTS=1 rewrites manifests-monitoring/prometheusrule.yaml.
func TestMonitoringManifests(t *testing.T) {
	var want map[string]any
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("..", "manifests-monitoring", "prometheusrule.yaml")
	if os.Getenv("KVROUTER_UPDATE_MANIFESTS") == "1" {
		obj := map[string]any{
			"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
			"metadata": map[string]any{"name": "kvrouter"}, "spec": want,
		}
		y, err := sigsyaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		head := "# Generated from manifests/charts/kvrouter/files/alerts.yaml by\n" +
			"# KVROUTER_UPDATE_MANIFESTS=1 go test -run TestMonitoringManifests ./manifests/\n"
		if err := os.WriteFile(file, append([]byte(head), y...), 0o644); err != nil { //nolint:gosec // a manifest in the repository
			t.Fatal(err)
		}
	}
	kust := kustomized(t, "../manifests-monitoring")
	chart := renderChart(t, "kvrouter", "kvrouter", "--set", "prometheusRule.enabled=true")
	for what, o := range map[string]*chartObject{
		"manifests-monitoring/": find(kust, "PrometheusRule", "kvrouter"),
		"the chart":             find(chart, "PrometheusRule", "kvrouter"),
	} {
		if o == nil {
			t.Errorf("%s has no PrometheusRule kvrouter", what)
			continue
		}
		if !reflect.DeepEqual(o.Object["spec"], want) {
			t.Errorf("%s's PrometheusRule differs from %s (KVROUTER_UPDATE_MANIFESTS=1 rewrites manifests-monitoring/)", what, alertsFile)
		}
	}
}
