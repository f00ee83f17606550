package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvrouter/kvrouter/internal/fixture/prometheus"
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
	var exprs []string
	for _, r := range prometheus.Rules(t, "../../manifests/charts/kvrouter/files/alerts.yaml") {
		exprs = append(exprs, r.Expr)
	}
	exportedSeries(t, "the alerts", exprs)
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

const dashboardFile = "../../manifests/charts/kvrouter/files/dashboard.json"

// dashboardQueries returns the dashboard's PromQL: every panel's targets
// and the variables' label_values queries (as their metric's selector), with
// Grafana's variables given values Prometheus accepts.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", `"$instance"`, `".*"`, `"$model"`, `".*"`)
	labelValues := regexp.MustCompile(`^label_values\((kvrouter_[a-z_]+), [a-z_]+\)$`)
	var queries []string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			t.Errorf("variable %s: query %v, want label_values(kvrouter_..., label)", v.Name, v.Query)
			continue
		}
		queries = append(queries, m[1])
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d queries; want the ${datasource} variable and a query", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: query %s does not follow the replica variable", p.Title, tg.Expr)
			}
			queries = append(queries, grafana.Replace(tg.Expr))
		}
	}
	if d.UID != "kvrouter" || len(queries) < 20 {
		t.Fatalf("dashboard uid %q with %d queries", d.UID, len(queries))
	}
	return queries
}

// TestDashboard: every query of the Grafana dashboard parses as PromQL
// (promtool checks them as recording rules) and reads only series kvrouter
// exports; panels have unique ids and use the data source variable.
func TestDashboard(t *testing.T) {
	queries := dashboardQueries(t)
	exportedSeries(t, "the dashboard", queries)
	rules := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": func() []any {
		var rs []any
		for i, q := range queries {
			rs = append(rs, map[string]any{"record": fmt.Sprintf("kvrouter:dashboard_query_%d", i), "expr": q})
		}
		return rs
	}()}}}
	y, err := sigsyaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "dashboard-rules.yaml", string(y))
	if out, err := prometheus.Promtool(t, "check", "rules", file); err != nil {
		t.Errorf("promtool check rules of the dashboard's queries: %v\n%s", err, out)
	}
}
