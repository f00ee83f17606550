package epp

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// parse registers the picker's flags, with kvrouter's own --pool-name and
// --pool-namespace, and parses args.
func parse(t *testing.T, args ...string) *Flags {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("pool-name", "", "")
	fs.String("pool-namespace", "", "")
	f := Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("arguments left over: %q", fs.Args())
	}
	return f
}

// TestGIEChartArgs: the arguments GIE v1.5.0's inferencepool chart passes
// by default (config/charts/epplib/templates/_deployment.yaml), with two
// replicas, and with metrics auth off, parse; the log and tracing settings
// map to kvrouter's, and the rest is said to change nothing.
func TestGIEChartArgs(t *testing.T) {
	plugins := filepath.Join(t.TempDir(), "default-plugins.yaml")
	if err := os.WriteFile(plugins, []byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := parse(t, "--pool-name", "qwen", "--pool-namespace", "llm", "--pool-group", "inference.networking.k8s.io",
		"--zap-encoder", "json", "--config-file", plugins, "--ha-enable-leader-election", "--v", "1", "--tracing=false",
		"--metrics-endpoint-auth=false")
	settings, notes, problems := f.Map()
	want := []Setting{
		{"tracing", "tracing.enabled", "false"},
		{"metrics-endpoint-auth", "admin.auth", "none"},
		{"v", "log.level", "info"},
		{"zap-encoder", "log.format", "json"},
	}
	if !slices.Equal(settings, want) || problems != nil {
		t.Errorf("Map() = %v, problems %v; want %v and none", settings, problems, want)
	}
	for _, flag := range []string{"--ha-enable-leader-election:", "--config-file:"} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, flag) }) {
			t.Errorf("notes %q say nothing of %s", notes, flag)
		}
	}
	if f.ConfigFile() != "" || !f.Given() {
		t.Errorf("ConfigFile() = %q, Given() = %v; want the plugins file ignored, the picker's flags given", f.ConfigFile(), f.Given())
	}
}

// TestLLMDChartArgs: llm-d's router chart renders flags as --key=value and
// always passes the health port; ports, TLS and the standalone selector
// map to kvrouter's settings.
func TestLLMDChartArgs(t *testing.T) {
	f := parse(t, "--endpoint-selector", "app=vllm,tier=gpu", "--endpoint-target-ports", "8200,8201", "--zap-encoder", "json",
		"--grpc-health-port", "9103", "--grpc-port=9102", "--metrics-port=9190", "--secure-serving=false", "--cert-path=/certs",
		"--refresh-metrics-interval=200ms", "--metrics-staleness-threshold=3s", "--enable-pprof=false", "--zap-log-level=debug",
		"--drain-timeout=45s", "--tls-min-version=VersionTLS13")
	settings, notes, problems := f.Map()
	want := map[string]string{
		"listen.grpc": ":9102", "listen.grpc_health": ":9103", "listen.admin": ":9190", "extproc.tls.mode": "off",
		"extproc.tls.cert_file": "/certs/tls.crt", "extproc.tls.key_file": "/certs/tls.key", "discovery.selector": "app=vllm,tier=gpu",
		"discovery.serving_port": "8200", "pods.metrics_interval": "200ms", "routing.stale_metrics_after": "3s",
		"shutdown.timeout": "45s", "admin.debug": "false", "log.level": "debug", "log.format": "json",
	}
	got := map[string]string{}
	for _, s := range settings {
		got[s.Path] = s.Value
	}
	if len(got) != len(want) || problems != nil {
		t.Errorf("Map() = %v, problems %v; want %v", got, problems, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, flag := range []string{"--endpoint-target-ports:", "--tls-min-version:"} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, flag) }) {
			t.Errorf("notes %q say nothing of %s", notes, flag)
		}
	}
}

func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool-group", "inference.networking.x-k8s.io"}, "--pool-group:"},
		{[]string{"--grpc-port", "0"}, "--grpc-port: 0"},
		{[]string{"--zap-encoder", "xml"}, "--zap-encoder:"},
		{[]string{"--zap-log-level", "loud"}, "--zap-log-level:"},
		{[]string{"--endpoint-selector", "a=b", "--pool-name", "p"}, "--endpoint-selector: with --pool-name"},
		{[]string{"--endpoint-target-ports", "70000"}, "--endpoint-target-ports: 70000"},
	} {
		_, _, problems := parse(t, tc.args...).Map()
		if len(problems) != 1 || !strings.HasPrefix(problems[0], tc.want) {
			t.Errorf("%q: problems %q, want one starting %q", tc.args, problems, tc.want)
		}
	}
	if f := parse(t, "--pool-name", "p"); f.Given() {
		t.Error("kvrouter's own --pool-name alone counts as the picker's flags")
	}
}

func TestConfigFileOfKVRouter(t *testing.T) {
	own := filepath.Join(t.TempDir(), "kvrouter.yaml")
	if err := os.WriteFile(own, []byte("log:\n  level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := parse(t, "--config-file", own)
	if f.ConfigFile() != own {
		t.Errorf("ConfigFile() = %q, want kvrouter's own file %s", f.ConfigFile(), own)
	}
	if _, notes, _ := f.Map(); notes != nil {
		t.Errorf("notes %q for kvrouter's own config file, want none", notes)
	}
}
