package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/certs"
	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer/models"
)

const exampleConfig = "../../config/kvrouter.example.yaml"

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileConfig sets every field away from its default.
const fileConfig = `
listen: {admin: "127.0.0.1:1", grpc: "127.0.0.1:2", http: "127.0.0.1:3"}
log: {level: debug}
shutdown: {drain_delay: 5s, timeout: 1m}
hash: {algorithm: sha256_cbor, seed: "0", block_size: 32}
index:
  max_entries: 1000
  backend: redis
  redis: {address: "r:6379", cluster: true, username: u, password_file: /pw, tls: true, tls_ca_file: /ca, key_prefix: "k:", ttl: 2h}
routing:
  {prefill_tokens_per_second: 25000, learn_prefill_speeds: false, tolerance: 0.1, homes: false, queue_prefills_per_pod: 3, queue_max_wait: 20s,
   saturation_waiting: 6, saturation_kv: 0.7, stale_metrics_after: 30s, destination_endpoints: 2, pd_threshold_tokens: 256, prefill_header: x-p}
tokenizers:
  models:
    m: /m
    r: {repo: Org/R, revision: v1, chat_template: "{{ messages }}", chat_template_content_format: openai}
    a: {alias: m}
  hf_cache: /hf
  prefix_cache_bytes: 1024
  max_tokenize_bytes: 2048
  hub: {endpoint: "http://mirror:1", token_env: T, token_file: /t, timeout: 5s, offline: true}
extproc: {body_mode: BUFFERED, max_body_bytes: 100}
pods:
  default_model: dm
  static: [{name: a, address: "10.0.0.1:80", model: m, aliases: [x], loras: [l], event_port: 7, replay_port: 8, dp_size: 2}]
  file: /pods.yaml
  file_interval: 2s
  metrics_interval: 250ms
discovery: {kubeconfig: off, namespaces: [n1, n2], selector: app=x}
`

// TestLoadConfigPrecedence: flags given on the command line win over the
// file, the file wins over the defaults, and a repeated flag replaces the
// file's list.
func TestLoadConfigPrecedence(t *testing.T) {
	file := writeFile(t, "kvrouter.yaml", fileConfig)
	fromFile := config{
		Listen:   listenConfig{Admin: "127.0.0.1:1", GRPC: "127.0.0.1:2", HTTP: "127.0.0.1:3"},
		Admin:    adminConfig{Auth: "auto", Debug: true, MaxConcurrent: 16},
		Log:      logConfig{Level: "debug", Format: "auto"},
		Shutdown: shutdownConfig{DrainDelay: 5 * time.Second, Timeout: time.Minute},
		Hash:     blockhash.Config{Algorithm: "sha256_cbor", Seed: "0", BlockSize: 32},
		Index: indexConfig{Config: func() kvindex.Config { c := kvindex.DefaultConfig(); c.MaxEntries = 1000; return c }(), Backend: "redis", Redis: redisindex.Connection{
			Address: "r:6379", Cluster: true, Username: "u", PasswordFile: "/pw", TLS: true, TLSCAFile: "/ca", KeyPrefix: "k:",
			TTL: 2 * time.Hour,
		}},
		Routing: func() router.Config {
			r := router.DefaultConfig()
			r.PrefillTokensPerSecond, r.LearnPrefillSpeeds, r.Tolerance, r.Homes, r.QueuePrefillsPerPod, r.QueueMaxWait = 25000, false, 0.1, false, 3, 20*time.Second
			r.SaturationWaiting, r.SaturationKV, r.StaleMetricsAfter, r.DestinationEndpoints, r.PDThresholdTokens, r.PrefillHeader = 6, 0.7, 30*time.Second, 2, 256, "x-p"
			return r
		}(),
		Tokenizers: models.Settings{
			Models: map[string]models.Model{
				"m": {Dir: "/m"}, "a": {Alias: "m"},
				"r": {Repo: "Org/R", Revision: "v1", ChatTemplate: "{{ messages }}", ContentFormat: "openai"},
			},
			HFCache: "/hf", PrefixCacheBytes: 1024, MaxTokenizeBytes: 2048,
			Hub: models.Hub{Endpoint: "http://mirror:1", TokenEnv: "T", TokenFile: "/t", Timeout: 5 * time.Second, Offline: true},
		},
		ExtProc: extprocConfig{
			Config: func() extproc.Config {
				c := extproc.DefaultConfig()
				c.BodyMode, c.MaxBodyBytes = extproc.Buffered, 100
				return c
			}(),
			TLS: certs.Settings{Mode: "auto", ReloadInterval: 10 * time.Second},
		},
		Pods: podsConfig{
			DefaultModel: "dm", File: "/pods.yaml", FileInterval: 2 * time.Second, MetricsInterval: 250 * time.Millisecond, EventSources: kvevents.SourcesAuto, DefaultEngine: pod.EngineVLLM,
			Static: []pod.Entry{{Name: "a", Address: "10.0.0.1:80", Model: "m", Aliases: []string{"x"}, LoRAs: []string{"l"}, EventPort: 7, ReplayPort: 8, DPSize: 2}},
		},
		Discovery: discovery.Settings{Kubeconfig: "off", Namespaces: []string{"n1", "n2"}, Selector: "app=x", ServingPort: 8000},
		file:      file,
	}
	tests := []struct {
		name string
		args []string
		want func(c *config)
	}{
		{"defaults", nil, func(c *config) { *c = defaultConfig() }},
		{"file", []string{"--config", file}, func(*config) {}},
		{"flags over file", []string{
			"--config", file, "--admin-addr", ":7", "--log-level", "warn", "--drain-delay", "0s", "--hash-seed", "s",
			"--block-size", "64", "--max-index-entries", "99", "--body-mode", "FULL_DUPLEX_STREAMED", "--pods-file", "",
			"--namespace", "n3", "--pod", "b=10.0.0.2:81", "--model", "q=/q", "--kubeconfig", "/kc", "--pods-metrics-interval", "1s",
		}, func(c *config) {
			c.Pods.MetricsInterval = time.Second
			c.Listen.Admin, c.Log.Level, c.Shutdown.DrainDelay, c.Hash.Seed = ":7", "warn", 0, "s"
			c.Hash.BlockSize, c.Index.MaxEntries, c.ExtProc.BodyMode, c.Pods.File = 64, 99, "FULL_DUPLEX_STREAMED", ""
			c.Discovery.Namespaces, c.podFlags, c.modelFlags, c.Discovery.Kubeconfig = []string{"n3"}, []string{"b=10.0.0.2:81"}, []string{"q=/q"}, "/kc"
		}},
		{"flag before --config", []string{"--selector", "app=y", "--config", file}, func(c *config) { c.Discovery.Selector = "app=y" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadConfig(tt.args)
			got.positions, got.flagsSet, got.picker = nil, nil, nil // where values came from: TestConfigProblems
			want := fromFile
			want.Pods.Static = slices.Clone(fromFile.Pods.Static)
			tt.want(&want)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("loadConfig(%q) = %+v, %v\nwant %+v", tt.args, got, err, want)
			}
		})
	}
}

// TestListFlagsReplaceFile: --pod and --model replace the file's lists once
// validated.
func TestListFlagsReplaceFile(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, "kvrouter.yaml", "pods: {static: [{name: a, address: \"10.0.0.1:80\", model: m}]}\ntokenizers: {models: {m: "+dir+"}}\n")
	c, err := loadConfig([]string{"--config", file, "--pod", "b=10.0.0.2:81,model=q", "--model", "q=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.static) != 1 || s.static[0].Name != "b" || s.static[0].Port != 81 || !reflect.DeepEqual(s.tok.Models, map[string]string{"q": dir}) {
		t.Errorf("validate: static pods %+v, models %v, want only b and q from the flags", s.static, s.tok.Models)
	}
}

// TestConfigProblems: every problem of the file and the flags is listed in
// one error that marks a configuration error.
func TestConfigProblems(t *testing.T) {
	pods := writeFile(t, "pods.yaml", "pods:\n- {name: a, address: nowhere}\n- {name: a, address: \"10.0.0.1:80\", model: m, flavor: red}\n")
	file := writeFile(t, "kvrouter.yaml", `
listen: {admin: "", grpc: "localhost"}
log: {level: loud}
shutdown: {drain_delay: 5, timeout: -1s}
hash: {algorithm: md5, block_size: 0}
index: {max_entries: 0, shards: 4}
routing: {prefill_tokens_per_second: 0, home_hold: 1, tolerance: 2, stale_metrics_after: -1s, queue_prefills_per_pod: -1, queue_max_wait: 5, saturation_kv: 2}
extproc: {body_mode: STREAMED, max_body_bytes: many}
tokenizers: {models: {m: /does/not/exist}}
pods: {file_interval: 0s, metrics_interval: -1s, static: [{name: s, address: "10.0.0.9:80", dp_size: 2000}], file: `+pods+`}
discovery: {namespaces: [""]}
`)
	c, err := loadConfig([]string{"--config", file, "--hash-seed", "\xff"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.validate("")
	if !errors.Is(err, conf.ErrConfig) {
		t.Fatalf("validate = %v, want a configuration error", err)
	}
	// Each problem says where its value came from: the file's line and
	// column, or the flag.
	want := []string{
		`kvrouter.yaml:6:25: index.shards: unknown field`,
		`kvrouter.yaml:4:25: shutdown.drain_delay: "5", want a duration such as "1.5s" or "2m"`,
		`kvrouter.yaml:8:48: extproc.max_body_bytes: "many", want an integer`,
		"kvrouter.yaml:2:17: listen.admin: empty",
		`kvrouter.yaml:2:27: listen.grpc: "localhost"`,
		`kvrouter.yaml:3:14: log.level: "loud"`,
		"kvrouter.yaml:4:37: shutdown.timeout: -1s",
		`kvrouter.yaml:5:19: hash.algorithm: "md5"`,
		`--hash-seed: "\xff" is not valid UTF-8`,
		"kvrouter.yaml:5:36: hash.block_size: 0",
		"kvrouter.yaml:6:22: index.max_entries: 0",
		"kvrouter.yaml:7:38: routing.prefill_tokens_per_second: 0, want a finite number > 0",
		"kvrouter.yaml:7:41: routing.home_hold: removed: homes are on or off, routing.homes (true or false)",
		"kvrouter.yaml:7:66: routing.tolerance: 2, want from 0 to 1",
		"kvrouter.yaml:7:90: routing.stale_metrics_after: -1s, want >= 0",
		"kvrouter.yaml:7:119: routing.queue_prefills_per_pod: -1, want >= 0 (0: no queue)",
		`kvrouter.yaml:7:139: routing.queue_max_wait: "5", want a duration such as "1.5s" or "2m"`,
		"kvrouter.yaml:7:157: routing.saturation_kv: 2, want from 0 to 1",
		`kvrouter.yaml:8:22: extproc.body_mode: "STREAMED"`,
		"kvrouter.yaml:9:26: tokenizers.models.m: stat /does/not/exist",
		"kvrouter.yaml:10:59: pods.static[0] (s): model: empty",
		"kvrouter.yaml:10:59: pods.static[0] (s): dp_size: 2000",
		"kvrouter.yaml:10:23: pods.file_interval: 0s",
		"kvrouter.yaml:10:45: pods.metrics_interval: -1s",
		`pods.yaml:2:3: pods[0] (a): address: "nowhere" is not ip:port`,
		`pods.yaml:3:3: pods[1]: pod name "a" used twice`,
		`pods.yaml:3:47: pods[1].flavor: unknown field`,
		"kvrouter.yaml:11:26: discovery.namespaces[0]: empty",
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("validate error lacks %q:\n%s", w, msg)
		}
	}
	for _, goWords := range []string{"main.", "!!", "unmarshal", "construct"} {
		if strings.Contains(msg, goWords) {
			t.Errorf("validate error speaks Go or YAML internals (%q):\n%s", goWords, msg)
		}
	}
	if n := strings.Count(msg, "\n  - "); !strings.HasPrefix(msg, "config: ") || n < len(want) {
		t.Errorf("validate error lists %d problems, want at least %d under a \"config: N problems:\" line:\n%s", n, len(want), msg)
	}
}

func TestConfigFileErrors(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"not yaml", "listen: [", "kvrouter.yaml:2:1: did not find expected node content"},
		{"the bad line, not its section's", "routing:\n  tolerance: 0.1\n  kv_pressure: 2\n bad: 1\n", "kvrouter.yaml:4:2: did not find expected key"},
		{"the bad item of a list", "pods:\n  static:\n  - name: a\n    address: x\n  - name: b\n   address: y\n", "kvrouter.yaml:6:"},
		{"two documents", "log: {level: info}\n---\nlog: {level: debug}\n", "kvrouter.yaml:2:1: want a single YAML document"},
		{"a list", "- a\n", "kvrouter.yaml:1:1: a list, want a mapping"},
		{"a list for a section", "listen: [1,2]\n", "kvrouter.yaml:1:9: listen: a list, want a mapping"},
		{"a mapping for a number", "hash: {block_size: {a: 1}}\n", "kvrouter.yaml:1:20: hash.block_size: a mapping, want an integer"},
		{"missing", "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "absent.yaml")
			if tt.content != "" {
				path = writeFile(t, "kvrouter.yaml", tt.content)
			}
			c, err := loadConfig([]string{"--config", path})
			if err == nil {
				_, err = c.validate("")
			}
			if !errors.Is(err, conf.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("serve --config with %s = %v, want a configuration error containing %q", tt.name, err, tt.want)
			}
		})
	}
	c, err := loadConfig([]string{"--config", writeFile(t, "empty.yaml", "# nothing\n")})
	if _, verr := c.validate(""); err != nil || verr != nil {
		t.Errorf("an empty config file = %v, %v, want the defaults", err, verr)
	}
}

// TestConfigExitStatus runs the real binary: a bad config file exits 2 with
// every problem on stderr.
func TestConfigExitStatus(t *testing.T) {
	file := writeFile(t, "kvrouter.yaml", "hash: {block_size: 0}\nindex: {max_entries: -1}\n")
	cmd := exec.Command(os.Args[0], "serve", "--config", file, "--admin-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "KVROUTER_TEST_MAIN=1")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "kvrouter: config: 2 problems:\n  - "+file+":1:20: hash.block_size") {
		t.Fatalf("serve with a bad config = exit %d %q, want exit 2 listing both problems", code, out)
	}
}

// TestRoutingReachesTheRouter: the routing section is the router's
// config, key for key; left out, the router's defaults. The removed
// routing flags say what replaced them.
func TestRoutingReachesTheRouter(t *testing.T) {
	file := writeFile(t, "kvrouter.yaml", "routing: {prefill_tokens_per_second: 25000, tolerance: 0.1, homes: false}\ntokenizers: {max_tokenize_bytes: 10}\n")
	for _, tt := range []struct {
		args []string
		want func(*router.Config)
	}{
		{nil, func(*router.Config) {}},
		{[]string{"--config", file}, func(r *router.Config) {
			r.PrefillTokensPerSecond, r.Tolerance, r.Homes, r.MaxTokenizeBytes = 25000, 0.1, false, 10
		}},
	} {
		c, err := loadConfig(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.validate("")
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		want := router.DefaultConfig()
		tt.want(&want)
		if !reflect.DeepEqual(s.router, want) {
			t.Errorf("%q: router config %+v, want %+v", tt.args, s.router, want)
		}
	}
	c, err := loadConfig([]string{"--hold-prefilling", "3", "--kv-pressure", "2", "--routing-tolerance", "0.1", "--learn-prefill-speeds"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.validate("")
	for _, want := range []string{
		"--hold-prefilling: renamed routing.queue_prefills_per_pod (0 turns the queue off)",
		"--kv-pressure: removed: a tuned constant now (docs/routing.md#tuned-constants)",
		"--routing-tolerance: removed: set routing.tolerance in the config file (--config)",
		"--learn-prefill-speeds: removed: set routing.learn_prefill_speeds in the config file (--config)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate with removed flags = %v, want %q", err, want)
		}
	}
}

// TestObjectivesConfig: the objectives list becomes the router's
// priorities; a nameless or repeated objective is a located problem.
func TestObjectivesConfig(t *testing.T) {
	good := writeFile(t, "kvrouter.yaml", "objectives:\n- {name: batch, priority: -1}\n- {name: chat, priority: 10}\n")
	c, err := loadConfig([]string{"--config", good})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil || !reflect.DeepEqual(s.objectives, router.Objectives{"batch": -1, "chat": 10}) {
		t.Fatalf("objectives = %v, %v; want batch -1 and chat 10", s.objectives, err)
	}
	bad := writeFile(t, "bad.yaml", "objectives:\n- {name: batch, priority: -1}\n- {name: batch, priority: 2}\n- {priority: 3}\n")
	c, err = loadConfig([]string{"--config", bad})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.validate("")
	for _, want := range []string{`bad.yaml:3:3: objectives[1]: "batch" named twice`, "bad.yaml:4:3: objectives[2]: no name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate = %v, want a problem %q", err, want)
		}
	}
}

// TestHashAlgorithms checks that hash.algorithm takes every vLLM algorithm
// and names them all when it refuses one.
func TestHashAlgorithms(t *testing.T) {
	for _, algo := range blockhash.Algorithms {
		c := defaultConfig()
		c.Hash.Algorithm = algo
		if _, err := c.validate(""); err != nil {
			t.Errorf("hash.algorithm %q: %v, want no problem", algo, err)
		}
	}
	c := defaultConfig()
	c.Hash.Algorithm = "xxh3"
	if _, err := c.validate(""); err == nil || !strings.Contains(err.Error(), `hash.algorithm: "xxh3", want one of "sha256", "sha256_cbor", "xxhash", "xxhash_cbor"`) {
		t.Errorf("hash.algorithm xxh3: %v, want it refused with every name", err)
	}
}
