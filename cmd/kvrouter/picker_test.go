package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPickerArgs: kvrouter started with the arguments GIE's inferencepool
// chart gives the Endpoint Picker serves the pool, logs as the chart asks,
// opens the plaintext health port the chart's probes ask (9003), and says
// which flags change nothing.
func TestPickerArgs(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Join(t.TempDir(), "default-plugins.yaml")
	if err := os.WriteFile(plugins, []byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig([]string{
		"--pool-name", "qwen", "--pool-namespace", "llm", "--pool-group", "inference.networking.k8s.io",
		"--zap-encoder", "json", "--config-file", plugins, "--v", "1", "--tracing=false", "--kubeconfig", kubeconfig,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	if s.disc.Pool.Name != "qwen" || s.disc.Pool.Namespace != "llm" || s.Log.Format != "json" || s.Log.Level != "info" || s.Listen.GRPCHealth != ":9003" || s.Listen.GRPC != ":9002" || c.file != "" {
		t.Errorf("pool %+v, log %+v, listen %+v, config file %q; want the pool, JSON at info, health on :9003, no config file", s.disc.Pool, s.Log, s.Listen, c.file)
	}
	if len(c.pickerNotes) != 1 || !strings.HasPrefix(c.pickerNotes[0], "--config-file:") || c.Tracing.Enabled {
		t.Errorf("notes %q, tracing %v; want --config-file's note, tracing off as --tracing=false says", c.pickerNotes, c.Tracing.Enabled)
	}
	// kvrouter's own health address wins over the picker's default.
	c, err = loadConfig([]string{"--pool-name", "qwen", "--zap-encoder", "json", "--grpc-health-addr", ":7003", "--kubeconfig", kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.GRPCHealth != ":7003" {
		t.Errorf("health address %q, want --grpc-health-addr's", c.Listen.GRPCHealth)
	}
	// A value the picker's flag cannot give is a problem under its name.
	c, err = loadConfig([]string{"--pool-name", "qwen", "--grpc-port", "70000", "--kubeconfig", kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.validate(""); err == nil || !strings.Contains(err.Error(), "--grpc-port: 70000") {
		t.Errorf("validate = %v, want the --grpc-port problem", err)
	}
}

// TestPickerArgsJoined: GIE's chart renders a flags-map entry
// `secure-serving: false` as `--secure-serving` `"false"`; kvrouter reads
// it as the entry meant.
func TestPickerArgsJoined(t *testing.T) {
	got := pickerArgs([]string{"--pool-name", "p", "--secure-serving", "false", "--v", "1", "--tracing=false", "--health-checking", "true"})
	want := []string{"serve", "--pool-name", "p", "--secure-serving=false", "--v", "1", "--tracing=false", "--health-checking=true"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("pickerArgs = %q, want %q", got, want)
	}
	for _, args := range [][]string{{"serve", "--x", "false"}, {"--help"}, {"-v"}} {
		if got := pickerArgs(args); strings.Join(got, " ") != strings.Join(args, " ") {
			t.Errorf("pickerArgs(%q) = %q, want them as they are", args, got)
		}
	}
}
