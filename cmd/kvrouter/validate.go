package main

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
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
	p := &conf.Problems{List: append(append([]string(nil), c.fileProblems...), c.flagProblems...)}
	located := len(p.List)
	c.applyListFlags(p)
	s := settings{config: c}
	c.checkListen(p)
	if err := s.level.UnmarshalText([]byte(c.Log.Level)); err != nil {
		p.Add("log.level: %q, want debug, info, warn or error", c.Log.Level)
	}
	if f := c.Log.Format; f != "json" && f != "text" && f != "auto" {
		p.Add("log.format: %q, want json, text or auto", f)
	}
	nonNegative(p, "shutdown.drain_delay", c.Shutdown.DrainDelay)
	nonNegative(p, "shutdown.timeout", c.Shutdown.Timeout)
	s.index, s.ext, s.router = c.Index.Config, c.ExtProc.Config, c.Routing
	s.router.MaxTokenizeBytes, s.router.Models = c.Tokenizers.MaxTokenizeBytes, router.ModelModes(c.Tokenizers.Modes())
	p.AddErr("hash", c.Hash.Validate())
	p.AddErr("index", s.index.Validate())
	p.AddErr("extproc", s.ext.Validate())
	for _, err := range conf.LeafErrors(s.router.Validate()) {
		section := "routing"
		if strings.HasPrefix(err.Error(), "max_tokenize_bytes:") {
			section = "tokenizers" // router.Config.MaxTokenizeBytes is tokenizers.max_tokenize_bytes
		}
		p.Add("%s.%s", section, err)
	}
	s.redis = c.redisSettings(s.index, p)
	var err error
	s.tok, s.chats, err = c.Tokenizers.Resolve(c.hubToken)
	c.tokenizerProblems(p, err)
	if c.Admin.MaxConcurrent <= 0 {
		p.Add("admin.max_concurrent: %d, want > 0", c.Admin.MaxConcurrent)
	}
	var list []string
	s.static, list = pod.FromEntries("pods.static", c.Pods.Static, c.Pods.DefaultModel)
	p.List = append(p.List, list...)
	if c.Pods.MetricsInterval <= 0 {
		p.Add("pods.metrics_interval: %v, want > 0", c.Pods.MetricsInterval)
	}
	if c.Pods.File != "" {
		if c.Pods.FileInterval <= 0 {
			p.Add("pods.file_interval: %v, want > 0", c.Pods.FileInterval)
		}
		_, list := discovery.ReadPodsFile(c.Pods.File, s.static, c.Pods.DefaultModel)
		for _, l := range list {
			p.Add("pods.file: %s", l)
		}
	}
	s.disc, err = c.Discovery.Resolve(c.kubeconfigEnv, serviceHost, c.Pods.DefaultModel)
	p.AddErr("discovery", err)
	s.certs, err = c.ExtProc.TLS.Resolve(s.disc.Kubeconfig != "")
	p.AddErr("extproc.tls", err)
	s.objectives, err = router.ObjectivesFrom(c.Objectives)
	for _, e := range conf.LeafErrors(err) {
		p.Add("objectives%s", e)
	}
	switch c.Admin.Auth {
	case "auto":
		s.adminAuth = s.disc.Kubeconfig != ""
	case "kubernetes":
		s.adminAuth = true
		if s.disc.Kubeconfig == "" {
			p.Add("admin.auth: kubernetes needs the Kubernetes API: discovery is off (--kubeconfig)")
		}
	case "none":
	default:
		p.Add("admin.auth: %q, want auto, kubernetes or none", c.Admin.Auth)
	}
	s.hash = c.Hash
	s.events = kvevents.DefaultConfig()
	s.events.Hash, s.events.Sources, s.events.DefaultEngine = s.hash, c.Pods.EventSources, c.Pods.DefaultEngine
	if _, err := pod.ParseEngine(c.Pods.DefaultEngine); err != nil {
		p.Add("pods.default_engine: %v", err)
	}
	if c.Pods.EventSources != kvevents.SourcesAuto && c.Pods.EventSources != kvevents.SourcesAlways && c.Pods.EventSources != kvevents.SourcesOff {
		p.Add("pods.event_sources: %q, want auto, always or off", c.Pods.EventSources)
	}
	for i := located; i < len(p.List); i++ {
		p.List[i] = c.locate(p.List[i])
	}
	return s, p.Err()
}

// locate says where the value a problem names came from: the flag given on
// the command line, or the line and column in the config file.
func (c config) locate(problem string) string {
	key := conf.Key(problem)
	for _, flag := range c.flagsSet {
		if key != "" && serveFlagTable.PathOf(flag) == key {
			return "--" + flag + problem[len(key):]
		}
	}
	return c.positions.Locate(c.file, problem)
}

// redisSettings checks index.backend and index.redis.*, and returns the
// redis backend's configuration, or nil for the memory backend.
func (c config) redisSettings(idx kvindex.Config, p *conf.Problems) *redisindex.Config {
	r := c.Index.Redis
	switch c.Index.Backend {
	case "memory":
		if r.Address != "" {
			p.Add("index.redis.address: %q, yet index.backend is memory; set it to redis", r.Address)
		}
		return nil
	case "redis":
	default:
		p.Add("index.backend: %q, want memory or redis", c.Index.Backend)
		return nil
	}
	cfg, err := r.Config(idx.SpeculativeTTL)
	p.AddErr("index.redis", err)
	return &cfg
}

// applyListFlags puts the --pod and --model flags, when given, in place of
// the file's pods.static and tokenizers.models.
func (c *config) applyListFlags(p *conf.Problems) {
	if c.podFlags != nil {
		c.Pods.Static = nil
		for _, f := range c.podFlags {
			e, err := pod.ParseFlag(f)
			if err != nil {
				p.Add("--pod: %v", err)
				continue
			}
			c.Pods.Static = append(c.Pods.Static, e)
		}
	}
	for _, err := range c.Tokenizers.ApplyFlags(c.modelFlags, c.templateFlags, c.formatFlags) {
		p.Add("%v", err)
	}
}

func (c config) checkListen(p *conf.Problems) {
	if c.Listen.Admin == "" {
		p.Add("listen.admin: empty; the admin server cannot be turned off")
	}
	for _, l := range []struct{ key, addr string }{{"admin", c.Listen.Admin}, {"grpc", c.Listen.GRPC}, {"grpc_health", c.Listen.GRPCHealth}, {"http", c.Listen.HTTP}} {
		if l.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(l.addr)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			p.Add("listen.%s: %q, want host:port or :port", l.key, l.addr)
		}
	}
}

func nonNegative(p *conf.Problems, key string, d time.Duration) {
	if d < 0 {
		p.Add("%s: %v, want >= 0", key, d)
	}
}
