package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

var seriesName = regexp.MustCompile(`\bkvrouter_[a-z_]+`)

// exportedSeries reports every kvrouter_* name in exprs that kvrouter does
// not export (a histogram's _bucket, _sum and _count are its own).
func exportedSeries(t *testing.T, what string, exprs []string) {
	t.Helper()
	metrics := kvrouterMetrics(t)
	for _, e := range exprs {
		for _, name := range seriesName.FindAllString(e, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(metrics, b) {
					base = b
				}
			}
			if !slices.Contains(metrics, base) {
				t.Errorf("%s reads %s, which kvrouter does not export:\n%s", what, name, e)
			}
		}
	}
}

// TestAlertsReadExportedSeries: every series the alerts read is one kvrouter
// exports, so none is silent for want of a series that never exists.
func TestAlertsReadExportedSeries(t *testing.T) {
	b, err := os.ReadFile("../../manifests/charts/kvrouter/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := sigsyaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) == 0 {
		t.Fatal("no alert read")
	}
	exportedSeries(t, "the alerts", exprs)
}
