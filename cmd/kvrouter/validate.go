package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/certs"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// settings is a validated config turned into the configurations of the
// parts it drives.
type settings struct {
	config
	level  slog.Level
	hash   blockhash.Config
	index  kvindex.Config
	redis  *redisindex.Config // nil: the memory backend
	router router.Config
	ext    extproc.Config
	events kvevents.Config
	tok    tokenizer.Config
	chats  map[string]chat.Options // by base model
	disc   discovery.Config        // Kubeconfig "" means no discovery
	certs  *certs.Config           // nil: the ext_proc port is plaintext
	// objectives are the InferenceObjectives' priorities from the config.
	objectives router.Objectives
	// adminAuth: /metrics and the debug endpoints need a Kubernetes token.
	adminAuth bool
	static    []pod.Pod // pods.static or --pod
}

// validate checks every field of c and reports every problem at once, each
// named by its yaml path; serviceHost is KUBERNETES_SERVICE_HOST. The pods
// file is read too: a broken one cannot start.
func (c config) validate(serviceHost string) (settings, error) {
	p := &problems{list: append(append([]string(nil), c.fileProblems...), c.flagProblems...)}
	located := len(p.list)
	c.applyListFlags(p)
	s := settings{config: c}
	c.checkListen(p)
	if err := s.level.UnmarshalText([]byte(c.Log.Level)); err != nil {
		p.add("log.level: %q, want debug, info, warn or error", c.Log.Level)
	}
	if f := c.Log.Format; f != "json" && f != "text" && f != "auto" {
		p.add("log.format: %q, want json, text or auto", f)
	}
	nonNegative(p, "shutdown.drain_delay", c.Shutdown.DrainDelay)
	nonNegative(p, "shutdown.timeout", c.Shutdown.Timeout)
	s.index, s.ext, s.router = c.Index.Config, c.ExtProc.Config, c.Routing
	s.router.MaxTokenizeBytes = c.Tokenizers.MaxTokenizeBytes
	for _, v := range []struct {
		section string
		err     error
	}{{"hash", c.Hash.Validate()}, {"index", s.index.Validate()}, {"extproc", s.ext.Validate()}, {"routing", s.router.Validate()}} {
		for _, err := range leafErrors(v.err) {
			section := v.section
			if strings.HasPrefix(err.Error(), "max_tokenize_bytes:") {
				section = "tokenizers" // router.Config.MaxTokenizeBytes is tokenizers.max_tokenize_bytes
			}
			p.add("%s.%s", section, err)
		}
	}
	s.redis = c.redisSettings(s.index, p)
	s.tok, s.chats = c.tokenizerSettings(p)
	if c.Admin.MaxConcurrent <= 0 {
		p.add("admin.max_concurrent: %d, want > 0", c.Admin.MaxConcurrent)
	}
	s.static = podsFrom("pods.static", c.Pods.Static, c.Pods.DefaultModel, p)
	if c.Pods.MetricsInterval <= 0 {
		p.add("pods.metrics_interval: %v, want > 0", c.Pods.MetricsInterval)
	}
	if c.Pods.File != "" {
		if c.Pods.FileInterval <= 0 {
			p.add("pods.file_interval: %v, want > 0", c.Pods.FileInterval)
		}
		_, list := readPodsFile(c.Pods.File, s.static, c.Pods.DefaultModel)
		for _, l := range list {
			p.add("pods.file: %s", l)
		}
	}
	s.disc = c.discoveryConfig(serviceHost)
	for i, ns := range c.Discovery.Namespaces {
		if ns == "" {
			p.add("discovery.namespaces[%d]: empty", i)
		}
	}
	if c.Discovery.Pool.Name != "" && s.disc.Kubeconfig == "" {
		p.add("discovery.pool.name: %q needs Kubernetes discovery, which is off (--kubeconfig)", c.Discovery.Pool.Name)
	}
	if c.Discovery.Pool.Name == "" && c.Discovery.Pool.Namespace != "" {
		p.add("discovery.pool.namespace: %q without discovery.pool.name", c.Discovery.Pool.Namespace)
	}
	s.certs = c.tlsSettings(s.disc.Kubeconfig != "", p)
	s.objectives = router.Objectives{}
	for i, o := range c.Objectives {
		switch _, dup := s.objectives[o.Name]; {
		case o.Name == "":
			p.add("objectives[%d]: no name", i)
		case dup:
			p.add("objectives[%d]: %q named twice", i, o.Name)
		default:
			s.objectives[o.Name] = o.Priority
		}
	}
	switch c.Admin.Auth {
	case "auto":
		s.adminAuth = s.disc.Kubeconfig != ""
	case "kubernetes":
		s.adminAuth = true
		if s.disc.Kubeconfig == "" {
			p.add("admin.auth: kubernetes needs the Kubernetes API: discovery is off (--kubeconfig)")
		}
	case "none":
	default:
		p.add("admin.auth: %q, want auto, kubernetes or none", c.Admin.Auth)
	}
	s.hash = c.Hash
	s.events = kvevents.DefaultConfig()
	s.events.Hash = s.hash
	if len(p.list) == 0 {
		s.backstop(p)
	}
	for i := located; i < len(p.list); i++ {
		p.list[i] = c.locate(p.list[i])
	}
	return s, p.err()
}

// problemKey is the config path a problem starts with.
var problemKey = regexp.MustCompile(`^[a-z_]+(?:\.[a-z_0-9-]+|\[\d+\])*`)

// locate says where the value a problem names came from: the flag given on
// the command line, or the line and column in the config file.
func (c config) locate(problem string) string {
	key := problemKey.FindString(problem)
	if key == "" {
		return problem
	}
	for _, flag := range c.flagsSet {
		if flagPath(flag) == key {
			return "--" + flag + problem[len(key):]
		}
	}
	return locateIn(c.file, c.positions, problem)
}

// locateIn prefixes a problem about a field of a YAML file with the file,
// line and column of the value (or of the nearest field holding it).
func locateIn(file string, positions map[string]position, problem string) string {
	for k := problemKey.FindString(problem); k != ""; k = parentPath(k) {
		if at, ok := positions[k]; ok {
			return fmt.Sprintf("%s:%d:%d: %s", file, at.line, at.column, problem)
		}
	}
	return problem
}

// parentPath is the path of the field that holds path's, "" at the top.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// leafErrors flattens err's joined errors, and a prefix wrapped over
// them, into one problem each.
func leafErrors(err error) []error {
	switch e := err.(type) { //nolint:errorlint // walks the tree errors.Is would
	case nil:
		return nil
	case interface{ Unwrap() []error }:
		var out []error
		for _, x := range e.Unwrap() {
			out = append(out, leafErrors(x)...)
		}
		return out
	case interface{ Unwrap() error }:
		if _, join := e.Unwrap().(interface{ Unwrap() []error }); join { // a package's prefix over its joined problems
			return leafErrors(e.Unwrap())
		}
	}
	return []error{err}
}

// tlsSettings checks extproc.tls and says how the ext_proc port serves TLS:
// nil for plaintext. auto is on when pods are discovered in Kubernetes.
func (c config) tlsSettings(inCluster bool, p *problems) *certs.Config {
	t := c.ExtProc.TLS
	on := false
	switch t.Mode {
	case "on":
		on = true
	case "auto":
		on = inCluster
	case "off":
	default:
		p.add("extproc.tls.mode: %q, want auto, on or off", t.Mode)
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		p.add("extproc.tls.cert_file: without extproc.tls.key_file (--grpc-tls-key); give both, or neither for a self-signed certificate")
	case t.CertFile == "" && t.KeyFile != "":
		p.add("extproc.tls.key_file: without extproc.tls.cert_file (--grpc-tls-cert); give both, or neither for a self-signed certificate")
	}
	for _, f := range []struct{ key, path string }{
		{"extproc.tls.cert_file", t.CertFile}, {"extproc.tls.key_file", t.KeyFile}, {"extproc.tls.client_ca_file", t.ClientCAFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			p.add("%s: %v", f.key, err)
		}
	}
	if t.ReloadInterval <= 0 {
		p.add("extproc.tls.reload_interval: %v, want > 0", t.ReloadInterval)
	}
	if !on {
		if t.CertFile != "" || t.ClientCAFile != "" {
			p.add("extproc.tls.mode: %q leaves TLS off (auto is on only with Kubernetes discovery), yet certificate files are given; set it to on", t.Mode)
		}
		return nil
	}
	return &certs.Config{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile, CheckEvery: t.ReloadInterval}
}

// backstop runs the parts' own validation, in case it is stricter than the
// checks above.
func (s settings) backstop(p *problems) {
	for _, v := range []struct {
		section string
		err     error
	}{
		{"tokenizers", s.tok.Validate()},
		{"hash", s.events.Validate()},
	} {
		if v.err != nil {
			for _, line := range strings.Split(v.err.Error(), "\n") {
				p.add("%s: %s", v.section, line)
			}
		}
	}
	if s.disc.Kubeconfig != "" {
		if err := s.disc.Validate(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				p.add("discovery: %s", line)
			}
		}
	}
}

// applyListFlags puts the --pod and --model flags, when given, in place of
// the file's pods.static and tokenizers.models.
func (c *config) applyListFlags(p *problems) {
	if c.podFlags != nil {
		c.Pods.Static = nil
		for _, f := range c.podFlags {
			sp, err := parseStaticPod(f)
			if err != nil {
				p.add("--pod: %v", err)
				continue
			}
			c.Pods.Static = append(c.Pods.Static, sp.entry())
		}
	}
	if c.modelFlags != nil {
		c.Tokenizers.Models = map[string]modelEntry{}
		for _, f := range c.modelFlags {
			name, spec, ok := strings.Cut(f, "=")
			if !ok || name == "" || spec == "" {
				p.add("--model: model %q: want NAME=DIR, NAME=hub:ORG/REPO[@REVISION] or NAME=alias:MODEL", f)
				continue
			}
			c.Tokenizers.Models[name] = modelSpec(spec)
		}
	}
	c.applyModelFlag(p, "--chat-template", c.templateFlags, func(m *modelEntry, v string) { m.ChatTemplate = v })
	c.applyModelFlag(p, "--chat-template-content-format", c.formatFlags, func(m *modelEntry, v string) { m.ContentFormat = v })
}

func (c config) checkListen(p *problems) {
	if c.Listen.Admin == "" {
		p.add("listen.admin: empty; the admin server cannot be turned off")
	}
	for _, l := range []struct{ key, addr string }{{"admin", c.Listen.Admin}, {"grpc", c.Listen.GRPC}, {"grpc_health", c.Listen.GRPCHealth}, {"http", c.Listen.HTTP}} {
		if l.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(l.addr)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			p.add("listen.%s: %q, want host:port or :port", l.key, l.addr)
		}
	}
}

// checkTokenizerDir checks that a model's tokenizer directory exists; its
// files are loaded, and any fault reported, when the app is built.
func checkTokenizerDir(p *problems, name, dir string) {
	if name == "" || dir == "" {
		p.add("tokenizers.models: model %q with directory %q: want both", name, dir)
		return
	}
	if fi, err := os.Stat(dir); err != nil {
		p.add("tokenizers.models.%s: %v", name, err)
	} else if !fi.IsDir() {
		p.add("tokenizers.models.%s: %s is not a directory", name, dir)
	}
}

func nonNegative(p *problems, key string, d time.Duration) {
	if d < 0 {
		p.add("%s: %v, want >= 0", key, d)
	}
}

// discoveryConfig is discovery's configuration; its Kubeconfig is "" when
// discovery is off.
func (c config) discoveryConfig(serviceHost string) discovery.Config {
	cfg := discovery.DefaultConfig()
	cfg.Kubeconfig = resolveKubeconfig(c.Discovery.Kubeconfig, serviceHost)
	cfg.Namespaces, cfg.DefaultModel, cfg.Selector = c.Discovery.Namespaces, c.Pods.DefaultModel, c.Discovery.Selector
	if c.Discovery.Pool.Name != "" {
		cfg.Pool = discovery.PoolRef{Name: c.Discovery.Pool.Name, Namespace: c.Discovery.Pool.Namespace}
		if cfg.Pool.Namespace == "" {
			cfg.Pool.Namespace = defaultPoolNamespace(cfg.Kubeconfig)
		}
	}
	return cfg
}

// podsFrom checks a list of pods, where names it in problems, and returns
// the good ones.
func podsFrom(where string, entries []podEntry, defaultModel string, p *problems) []pod.Pod {
	out := make([]pod.Pod, 0, len(entries))
	seen := map[string]bool{}
	for i, e := range entries {
		pod, errs := e.pod(defaultModel)
		for _, err := range errs {
			p.add("%s[%d] (%s): %s", where, i, e.Name, err)
		}
		if e.Name != "" && seen[e.Name] {
			p.add("%s[%d]: pod name %q used twice", where, i, e.Name)
			continue
		}
		seen[e.Name] = true
		if len(errs) == 0 {
			out = append(out, pod)
		}
	}
	return out
}

func (s staticPod) entry() podEntry {
	return podEntry{Name: s.name, Address: s.address(), Model: s.model, EventPort: s.events, ReplayPort: s.replay, DPSize: s.dp, Role: string(s.role)}
}

// serviceAccountNamespace is the file that holds the namespace of an
// in-cluster pod.
var serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultPoolNamespace is --pool-namespace's default: kvrouter's own
// namespace in-cluster, else "default" (as the reference picker's).
func defaultPoolNamespace(kubeconfig string) string {
	if kubeconfig == discovery.InCluster {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b))
		}
	}
	return "default"
}
