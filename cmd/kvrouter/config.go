package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/certs"
	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/internal/tracing"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer/models"
)

// config is everything `kvrouter serve` can be told: the YAML config file
// (--config) decoded over the defaults, then the flags given on the command
// line over that. Every field has a yaml key; config/kvrouter.example.yaml
// documents each one.
type config struct {
	Listen     listenConfig     `yaml:"listen"`
	Admin      adminConfig      `yaml:"admin"`
	Log        logConfig        `yaml:"log"`
	Shutdown   shutdownConfig   `yaml:"shutdown"`
	Hash       blockhash.Config `yaml:"hash"` // must equal the pods' vLLM settings
	Index      indexConfig      `yaml:"index"`
	Routing    router.Config    `yaml:"routing"`
	Tokenizers models.Settings  `yaml:"tokenizers"` // --model, --chat-template*, --hf-cache, --hub-*
	ExtProc    extprocConfig    `yaml:"extproc"`
	Pods       podsConfig       `yaml:"pods"`
	// Objectives are the priorities of the InferenceObjectives requests
	// name in x-gateway-inference-objective, without Kubernetes.
	Objectives []router.Objective `yaml:"objectives"`
	Discovery  discovery.Settings `yaml:"discovery"` // --kubeconfig, --namespace, --selector, --pool-*
	Tracing    tracing.Settings   `yaml:"tracing"`

	// file is --config, fileProblems what was wrong in it and positions
	// where each of its fields is; podFlags and modelFlags are the raw --pod
	// and --model flags, which replace pods.static and tokenizers.models when
	// given; flagsSet names the flags given and flagProblems the values they
	// could not hold. None is in the file.
	file                 string
	fileProblems         []string
	positions            conf.Positions
	podFlags, modelFlags []string
	// templateFlags and formatFlags are the raw --chat-template and
	// --chat-template-content-format flags, set over tokenizers.models.
	templateFlags, formatFlags []string
	flagsSet                   []string
	flagProblems               []string
	// hubToken is the hub token read from the environment (never logged);
	// kubeconfigEnv is $KUBECONFIG.
	hubToken, kubeconfigEnv string
	// picker is the Endpoint Picker's flags (internal/epp); pickerNotes
	// say which of those given change nothing, and why.
	picker      *epp.Flags
	pickerNotes []string
}

// listenConfig is where the servers listen; an empty address turns a
// server off (the admin server cannot be).
type listenConfig struct {
	Admin string `yaml:"admin"` // --admin-addr
	GRPC  string `yaml:"grpc"`  // --grpc-addr
	// GRPCHealth serves only the gRPC health service, in plaintext, for
	// probes that cannot speak TLS (the kubelet's gRPC probes): what the
	// reference Endpoint Picker serves on :9003.
	GRPCHealth string `yaml:"grpc_health"` // --grpc-health-addr
	HTTP       string `yaml:"http"`        // --http-addr
}

// adminConfig is who may use the admin server's endpoints beyond the
// health probes.
type adminConfig struct {
	// Auth guards /metrics and the debug endpoints: kubernetes (a bearer
	// token authorized by the API server), none, or auto (kubernetes with
	// discovery, none otherwise).
	Auth  string `yaml:"auth"`  // --admin-auth
	Debug bool   `yaml:"debug"` // --admin-debug: /debug/pprof/, /debug/pods, /debug/tokenizers, POST /v1/score
	// MaxConcurrent bounds the requests served at once beyond the probes;
	// one more gets 429.
	MaxConcurrent int `yaml:"max_concurrent"` // --admin-max-concurrent
}

type logConfig struct {
	Level  string `yaml:"level"`  // --log-level: debug, info, warn or error
	Format string `yaml:"format"` // --log-format: json, text or auto
}

type shutdownConfig struct {
	DrainDelay time.Duration `yaml:"drain_delay"` // --drain-delay
	Timeout    time.Duration `yaml:"timeout"`     // --shutdown-timeout
}

type indexConfig struct {
	kvindex.Config `yaml:",inline"`      // max_entries: --max-index-entries
	Backend        string                `yaml:"backend"` // --index-backend: memory or redis
	Redis          redisindex.Connection `yaml:"redis"`   // --index-redis-*
}

type extprocConfig struct {
	extproc.Config `yaml:",inline"` // body_mode, max_body_bytes, max_streams
	TLS            certs.Settings   `yaml:"tls"` // --grpc-tls*
}

// podsConfig is the pods known without Kubernetes, and the model of pods
// that name none.
type podsConfig struct {
	DefaultModel string        `yaml:"default_model"` // --default-model
	Static       []pod.Entry   `yaml:"static"`        // --pod
	File         string        `yaml:"file"`          // --pods-file
	FileInterval time.Duration `yaml:"file_interval"` // --pods-file-interval
	// MetricsInterval is how often each ready pod's vLLM /metrics is read.
	MetricsInterval time.Duration `yaml:"metrics_interval"` // --pods-metrics-interval
	EventSources    string        `yaml:"event_sources"`    // --pods-event-sources: auto, always, off
	DefaultEngine   string        `yaml:"default_engine"`   // --default-engine: vllm, sglang, trtllm
}

// defaultConfig is serve's configuration when nothing is said: vLLM's own
// defaults for the hash chain and event ports.
func defaultConfig() config {
	return config{
		Listen:     listenConfig{Admin: ":9090", GRPC: ":9002"},
		Admin:      adminConfig{Auth: "auto", Debug: true, MaxConcurrent: 16},
		Log:        logConfig{Level: "info", Format: "auto"},
		Shutdown:   shutdownConfig{Timeout: 10 * time.Second},
		Hash:       blockhash.DefaultConfig(),
		Index:      indexDefaults(),
		Tokenizers: tokenizerDefaults(),
		Routing:    router.DefaultConfig(),
		ExtProc:    extprocConfig{Config: extproc.DefaultConfig(), TLS: certs.DefaultSettings()},
		Pods:       podsConfig{FileInterval: time.Second, MetricsInterval: 100 * time.Millisecond, EventSources: kvevents.SourcesAuto, DefaultEngine: pod.EngineVLLM},
		Discovery:  discovery.DefaultSettings(),
	}
}

// tokenizerDefaults is the tokenizers section's defaults, with the
// router's bound on the bodies it tokenizes.
func tokenizerDefaults() models.Settings {
	t := models.Default()
	t.MaxTokenizeBytes = router.DefaultConfig().MaxTokenizeBytes
	return t
}

// indexDefaults is the index's own defaults: the memory backend.
func indexDefaults() indexConfig {
	return indexConfig{Config: kvindex.DefaultConfig(), Backend: "memory", Redis: redisindex.DefaultConnection()}
}

// serveFlagTable is serve's flags that set a field of the config, in the
// order --help lists them. Only infrastructure has flags (where kvrouter
// listens and logs, finds its pods and tokenizers, hashes, and keeps its
// index, and how Envoy talks to it); the routing policy is set in the file.
var serveFlagTable = conf.Table{
	{Name: "admin-addr", Path: "listen.admin", Help: "admin HTTP server: /healthz, /readyz, /metrics, /debug/pprof/, /debug/pods, /debug/tokenizers, POST /v1/score"},
	{Name: "grpc-addr", Path: "listen.grpc", Help: "Envoy ext_proc gRPC server; empty: off"},
	{Name: "grpc-health-addr", Path: "listen.grpc_health", Help: "plaintext gRPC health server (the ext_proc port's health, for probes without TLS, as the reference picker's :9003); empty: off"},
	{Name: "http-addr", Path: "listen.http", Help: "standalone OpenAI-compatible HTTP proxy (no Envoy needed); empty: off"},
	{Name: "admin-auth", Path: "admin.auth", Help: "who may read /metrics and the debug endpoints: kubernetes (a bearer token the API server authorizes), none, or auto (kubernetes with discovery)"},
	{Name: "admin-max-concurrent", Path: "admin.max_concurrent", Help: "admin requests served at once beyond the probes; more get 429"},
	{Name: "admin-debug", Path: "admin.debug", Help: "serve /debug/pprof/, /debug/pods, /debug/tokenizers and POST /v1/score (behind --admin-auth)"},
	{Name: "log-level", Path: "log.level", Help: "log level: debug, info, warn or error"},
	{Name: "log-format", Path: "log.format", Help: "log format: json, text, or auto (text on a terminal, JSON otherwise)"},
	{Name: "drain-delay", Path: "shutdown.drain_delay", Help: "on SIGTERM, how long to report not-ready before stopping, so load balancers stop sending work"},
	{Name: "shutdown-timeout", Path: "shutdown.timeout", Help: "how long in-flight work may take to finish once stopping"},
	{Name: "kubeconfig", Path: "discovery.kubeconfig", Help: "discover vLLM pods in Kubernetes with this kubeconfig file, \"in-cluster\" or \"off\"; default: $KUBECONFIG, else in-cluster when KUBERNETES_SERVICE_HOST is set, else off"},
	{Name: "namespace", Path: "discovery.namespaces", Help: "a namespace to discover pods in (repeatable); default: all"},
	{Name: "selector", Path: "discovery.selector", Help: "the label selector of the vLLM pods to discover"},
	{Name: "pool-name", Path: "discovery.pool.name", Help: "serve the ready pods of this InferencePool (inference.networking.k8s.io/v1) on its target ports, instead of --selector"},
	{Name: "pool-namespace", Path: "discovery.pool.namespace", Help: "the InferencePool's namespace; default: kvrouter's own in-cluster, else \"default\""},
	{Name: "pods-file", Path: "pods.file", Help: "a YAML file listing vLLM pods without Kubernetes, reloaded when it changes"},
	{Name: "pods-file-interval", Path: "pods.file_interval", Help: "how often the pods file is checked for changes"},
	{Name: "pods-metrics-interval", Path: "pods.metrics_interval", Help: "how often each ready pod's vLLM /metrics is read for its queue and KV use"},
	{Name: "default-engine", Path: "pods.default_engine", Help: "the engine of pods that name none: vllm, sglang or trtllm (their KV events and metrics)"},
	{Name: "pods-event-sources", Path: "pods.event_sources", Help: "which pods are asked GET /kv_event_sources for their KV-event endpoints: auto (those with no event ports configured), always, off"},
	{Name: "hf-cache", Path: "tokenizers.hf_cache", Help: "the Hugging Face hub cache directory tokenizers are found in and downloaded to (shared with the pods'); default: $HF_HUB_CACHE, $HF_HOME/hub, else ~/.cache/huggingface/hub"},
	{Name: "hub-endpoint", Path: "tokenizers.hub.endpoint", Help: "the hub (or mirror) tokenizers missing from --hf-cache are downloaded from; $HF_ENDPOINT when not given"},
	{Name: "hub-token-env", Path: "tokenizers.hub.token_env", Help: "the environment variable holding the hub token"},
	{Name: "hub-token-file", Path: "tokenizers.hub.token_file", Help: "a file holding the hub token (a mounted Secret), instead of --hub-token-env; read at each download"},
	{Name: "hub-timeout", Path: "tokenizers.hub.timeout", Help: "how long the download of one tokenizer file may take"},
	{Name: "hub-offline", Path: "tokenizers.hub.offline", Help: "download nothing: tokenizers come from --model and --hf-cache only; $HF_HUB_OFFLINE=1 when not given"},
	{Name: "default-model", Path: "pods.default_model", Help: "the model of pods that do not name one"},
	{Name: "hash-algo", Path: "hash.algorithm", Help: "the pods' --prefix-caching-hash-algo: sha256, sha256_cbor, xxhash or xxhash_cbor"},
	{Name: "hash-seed", Path: "hash.seed", Help: "the pods' PYTHONHASHSEED (vLLM >= 0.30 uses \"vllm-none-hash\" when unset; the empty string is a seed too)"},
	{Name: "block-size", Path: "hash.block_size", Help: "the pods' KV cache block size in tokens"},
	{Name: "max-index-entries", Path: "index.max_entries", Help: "bound on (block, pod) index entries; about 45 bytes each"},
	{Name: "index-backend", Path: "index.backend", Help: "where the index lives: memory (each replica its own), or redis (shared by the replicas through Redis or Valkey, --index-redis-*)"},
	{Name: "index-redis-addr", Path: "index.redis.address", Help: "the Redis or Valkey server, host:port (with --index-redis-cluster: comma-separated seed nodes)"},
	{Name: "index-redis-cluster", Path: "index.redis.cluster", Help: "the server is a Redis Cluster"},
	{Name: "index-redis-username", Path: "index.redis.username", Help: "the ACL user; empty: the default user"},
	{Name: "index-redis-password-env", Path: "index.redis.password_env", Help: "the environment variable holding the password"},
	{Name: "index-redis-password-file", Path: "index.redis.password_file", Help: "a file holding the password (a mounted Secret)"},
	{Name: "index-redis-tls", Path: "index.redis.tls", Help: "connect with TLS"},
	{Name: "index-redis-tls-ca", Path: "index.redis.tls_ca_file", Help: "PEM bundle of the CAs that sign the server's certificate; empty: the system's"},
	{Name: "index-redis-key-prefix", Path: "index.redis.key_prefix", Help: "the prefix of every key, so that fleets can share a server"},
	{Name: "index-redis-ttl", Path: "index.redis.ttl", Help: "how long a block's key lives after its last write (Redis's maxmemory is the hard bound); 0: no TTL, maxmemory with allkeys-lfu the bound"},
	{Name: "body-mode", Path: "extproc.body_mode", Help: "the request body mode Envoy's ext_proc filter uses: FULL_DUPLEX_STREAMED or BUFFERED"},
	{Name: "max-body-bytes", Path: "extproc.max_body_bytes", Help: "largest request body accepted (413 beyond)"},
	{Name: "extproc-response-ids", Path: "extproc.response_ids", Help: "ask Envoy for the body of Responses API replies to learn their response ids, when its filter sends none (response_body_mode NONE, allow_mode_override)"},
	{Name: "max-streams", Path: "extproc.max_streams", Help: "ext_proc streams (requests in flight through Envoy) open at once; more are refused (Envoy: status_on_error)"},
	{Name: "grpc-tls", Path: "extproc.tls.mode", Help: "TLS on the ext_proc port: on, off, or auto (on when discovering pods in Kubernetes)"},
	{Name: "grpc-tls-cert", Path: "extproc.tls.cert_file", Help: "PEM certificate (chain) for the ext_proc port, reloaded on change; empty: self-signed"},
	{Name: "grpc-tls-key", Path: "extproc.tls.key_file", Help: "PEM key of --grpc-tls-cert"},
	{Name: "grpc-tls-client-ca", Path: "extproc.tls.client_ca_file", Help: "PEM bundle of client CAs: clients must present a certificate one signed (mutual TLS)"},
	{Name: "grpc-tls-reload-interval", Path: "extproc.tls.reload_interval", Help: "how often the certificate files are read for changes"},
}

// serveFlags defines serve's flags on fs, each over its field of c: the
// table's, then those that set no single field (the config file, and the
// lists that replace the file's).
func serveFlags(c *config, fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&c.file, "config", "", "a YAML config file (every field: config/kvrouter.example.yaml); flags given on the command line win over it")
	serveFlagTable.Bind(fs, c)
	fs.Var(conf.NewList(&c.podFlags), "pod", "a vLLM pod without Kubernetes: name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R][,engine=E] (repeatable; dp: data-parallel ranks behind the port, each routed to on its own; role: prefill, decode or both; engine: vllm, sglang or trtllm)")
	fs.Var(conf.NewList(&c.modelFlags), "model", "where a model's tokenizer is: NAME=DIR (tokenizer.json, tokenizer_config.json), NAME=hub:ORG/REPO[@REVISION], NAME=alias:MODEL or NAME=render:URL (vLLM's render endpoints; render:pods) (repeatable); other models are the hub repository of their own name")
	fs.Var(conf.NewList(&c.templateFlags), "chat-template", "a model's chat template, as the pods' --chat-template: NAME=FILE, NAME=TEXT or NAME=TEMPLATE-NAME (repeatable)")
	fs.Var(conf.NewList(&c.formatFlags), "chat-template-content-format", "a model's message content format, as the pods' --chat-template-content-format: NAME=auto, NAME=string or NAME=openai (repeatable)")
	conf.Removed(fs, removedFlagKeys, removedKeys, removedSwitches, &c.flagProblems)
}

// loadConfig parses serve's command line alone, as `kvrouter serve args`
// would, for tests and tools.
func loadConfig(args []string) (config, error) {
	c := defaultConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serveFlags(&c, fs)
	c.picker = epp.Register(fs)
	lenientFlags(fs, &c.flagProblems)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return configOver(c, fs), nil
}

// configOver returns the configuration serve runs with, given the flags
// parsed into c: when --config names a file, the file over the defaults,
// then the flags given on the command line over the file. Problems with the
// file or a value are reported by validate with every other problem.
func configOver(c config, fs *pflag.FlagSet) config {
	fs.Visit(func(f *pflag.Flag) { c.flagsSet = append(c.flagsSet, f.Name) })
	if c.file == "" && c.picker != nil {
		c.file = c.picker.ConfigFile() // the picker's --config-file, when it is kvrouter's
	}
	if c.file == "" {
		return c.overPicker()
	}
	fc := defaultConfig()
	fc.fileProblems, fc.positions = conf.DecodeFile(c.file, &fc, removedKeys)
	over := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	serveFlags(&fc, over)
	fs.Visit(func(f *pflag.Flag) {
		v := f.Value
		if l, ok := v.(*lenientValue); ok {
			v = l.Value
		}
		if list, ok := v.(pflag.SliceValue); ok {
			_ = over.Lookup(f.Name).Value.(pflag.SliceValue).Replace(list.GetSlice()) // a list takes any string
			return
		}
		_ = over.Set(f.Name, v.String()) // a value that parsed once parses again; a bad one left the default
	})
	fc.file, fc.flagsSet, fc.flagProblems, fc.picker = c.file, c.flagsSet, c.flagProblems, c.picker
	return fc.overPicker()
}

// overPicker sets what the Endpoint Picker's flags given on the command
// line say, over the file and kvrouter's own flags (epp.Flags.Apply).
func (c config) overPicker() config {
	if c.picker != nil {
		notes, problems := c.picker.Apply(&c, c.given)
		c.pickerNotes, c.flagProblems = notes, append(c.flagProblems, problems...)
	}
	return c
}
