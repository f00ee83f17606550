package main

import (
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a registry that remembers what was registered on it.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// kvrouterMetrics returns the name of every kvrouter_* metric a serving
// kvrouter registers, Kubernetes discovery of an InferencePool and the redis
// index backend included (building it connects nowhere).
func kvrouterMetrics(t *testing.T) []string {
	t.Helper()
	kubeconfig := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`)
	c, err := loadConfig([]string{"--kubeconfig", kubeconfig, "--pool-name", "p", "--index-backend", "redis", "--index-redis-addr", "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Registry: prometheus.NewRegistry()}
	if _, err := newAppOn(s, slog.New(slog.DiscardHandler), rec); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, col := range rec.collectors {
		ch := make(chan *prometheus.Desc)
		go func() {
			col.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			if strings.HasPrefix(m[1], "kvrouter_") && !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return names
}

// TestEveryMetricDocumented: the metrics section of docs/operations.md names
// every kvrouter_* metric, and no metric that does not exist.
func TestEveryMetricDocumented(t *testing.T) {
	const doc = "docs/operations.md"
	text, err := os.ReadFile("../../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n## Metrics\n")
	if !ok {
		t.Fatalf("%s has no ## Metrics section", doc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	names := kvrouterMetrics(t)
	if len(names) < 20 {
		t.Fatalf("found %d kvrouter metrics (%v), want the whole set", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(section, "`"+n+"`") {
			t.Errorf("%s's metrics section does not name `%s`", doc, n)
		}
	}
	for _, m := range regexp.MustCompile("`(kvrouter_[a-z_]+)`").FindAllStringSubmatch(section, -1) {
		if !slices.Contains(names, m[1]) {
			t.Errorf("%s's metrics section names `%s`, which kvrouter does not register", doc, m[1])
		}
	}
}
