package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/kvrouter/kvrouter/internal/fixture/helm"
)

const chartDir = "../../manifests/charts/kvrouter"

// chartSettings renders the chart with the value file of a shape (ci/NAME-values.yaml,
// "" for its defaults) in namespace ns and loads its kvrouter configuration
// as serve would.
func chartSettings(t *testing.T, shape, ns string, args ...string) (config, settings, map[string]string) {
	t.Helper()
	if shape != "" {
		args = append([]string{"-f", filepath.Join(chartDir, "ci", shape+"-values.yaml")}, args...)
	}
	return deploymentSettings(t, helm.Template(t, chartDir, "kvrouter", ns, args...))
}

// TestChartConfig runs every shape of the Helm chart through serve's own
// loading and checks each sets what it is for; and the chart in the kustomize
// base's shape gives kvrouter exactly the base's settings, so the two cannot
// drift apart (manifests/chartdrift_test.go compares their objects).
func TestChartConfig(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		_, s, _ := chartSettings(t, "", "llm")
		if s.disc.Selector != "kvrouter.io/pool=default" || !reflect.DeepEqual(s.disc.Namespaces, []string{"llm"}) || !s.adminAuth ||
			s.Tokenizers.HFCache != "/hf-cache" || s.certs == nil || s.Listen.GRPC != ":9002" || s.Listen.Admin != ":9090" {
			t.Errorf("default settings: discovery %+v, admin auth %v, hf cache %q, certs %+v, listen %+v", s.disc, s.adminAuth, s.Tokenizers.HFCache, s.certs, s.Listen)
		}
	})
	t.Run("kustomize-base", func(t *testing.T) {
		base, _, baseTemplates := deploymentSettings(t, kustomizeDocs(t, "../../manifests"))
		chart, _, chartTemplates := chartSettings(t, "kustomize-base", "kvrouter",
			"--set-file", `tokenizers.chatTemplates.Qwen/Qwen3-0\.6B=../../manifests/templates/qwen3-tools.jinja`)
		// The base takes its namespace from the pod (a placeholder here), the
		// chart from the release; and each names its template file its way.
		if !reflect.DeepEqual(chart.Discovery.Namespaces, []string{"kvrouter"}) {
			t.Errorf("the chart's namespaces = %q, want the release's", chart.Discovery.Namespaces)
		}
		chart.Discovery.Namespaces = base.Discovery.Namespaces
		for name := range baseTemplates {
			if b, c := readString(t, baseTemplates[name]), readString(t, chartTemplates[name]); b == "" || b != c {
				t.Errorf("model %s's chat template differs: base %d bytes, chart %d", name, len(b), len(c))
			}
			bm, cm := base.Tokenizers.Models[name], chart.Tokenizers.Models[name]
			bm.ChatTemplate, cm.ChatTemplate = "", ""
			base.Tokenizers.Models[name], chart.Tokenizers.Models[name] = bm, cm
		}
		b, c := marshal(t, base), marshal(t, chart)
		if b != c {
			t.Errorf("kvrouter's settings differ between the kustomize base and the chart:\n--- base\n%s\n--- chart\n%s", b, c)
		}
	})
	t.Run("pool", func(t *testing.T) {
		_, s, _ := chartSettings(t, "pool", "llm")
		if s.disc.Pool.String() != "llm/vllm-qwen3" || s.Pods.DefaultModel != "Qwen/Qwen3-0.6B" {
			t.Errorf("pool settings: pool %s, default model %q", s.disc.Pool, s.Pods.DefaultModel)
		}
	})
	t.Run("redis-deploy", func(t *testing.T) {
		_, s, _ := chartSettings(t, "redis-deploy", "llm")
		if s.redis == nil || !reflect.DeepEqual(s.redis.Addrs, []string{"kvrouter-redis:6379"}) || s.redis.TTL != 0 {
			t.Errorf("redis-deploy index = %+v, want the deployed server's Service, no TTL", s.redis)
		}
	})
	t.Run("redis-external", func(t *testing.T) {
		c, s, _ := chartSettings(t, "redis-external", "llm")
		if s.redis == nil || len(s.redis.Addrs) != 3 || !s.redis.Cluster || !c.Index.Redis.TLS || c.Index.Redis.PasswordFile != "/etc/kvrouter-redis/password" {
			t.Errorf("redis-external index = %+v (%+v), want the cluster over TLS with the mounted password", s.redis, c.Index.Redis)
		}
	})
	t.Run("tls-monitoring", func(t *testing.T) {
		c, s, templates := chartSettings(t, "tls-monitoring", "llm")
		if s.certs == nil || c.ExtProc.TLS.CertFile != "/etc/kvrouter-tls/tls.crt" || c.ExtProc.TLS.KeyFile != "/etc/kvrouter-tls/tls.key" ||
			!reflect.DeepEqual(s.disc.Namespaces, []string{"team-a", "team-b"}) || templates["Qwen/Qwen3-0.6B"] == "" {
			t.Errorf("tls-monitoring: certs %+v (%+v), namespaces %q, templates %v", s.certs, c.ExtProc.TLS, s.disc.Namespaces, templates)
		}
	})
	t.Run("scale-from-zero", func(t *testing.T) {
		_, s, _ := chartSettings(t, "scale-from-zero", "llm")
		if s.router.ScaleFromZeroWait != 60*time.Second || s.certs != nil {
			t.Errorf("scale-from-zero: wait %v, certs %+v; want 60s, plaintext", s.router.ScaleFromZeroWait, s.certs)
		}
	})
	t.Run("pool-existing", func(t *testing.T) {
		_, s, _ := chartSettings(t, "pool-existing", "llm")
		if s.disc.Pool.String() != "llm/llama" || s.Tokenizers.HFCache != "" {
			t.Errorf("pool-existing: pool %s, hf cache %q", s.disc.Pool, s.Tokenizers.HFCache)
		}
	})
}

func marshal(t *testing.T, c config) string {
	t.Helper()
	y, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(y)
}

func readString(t *testing.T, file string) string {
	t.Helper()
	if file == "" {
		return ""
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
