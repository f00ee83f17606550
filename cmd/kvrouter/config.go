package main

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
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
	Tokenizers tokenizersConfig `yaml:"tokenizers"`
	ExtProc    extprocConfig    `yaml:"extproc"`
	Pods       podsConfig       `yaml:"pods"`
	// Objectives are the priorities of the InferenceObjectives requests
	// name in x-gateway-inference-objective, without Kubernetes.
	Objectives []objectiveEntry `yaml:"objectives"`
	Discovery  discoverySection `yaml:"discovery"`

	// file is --config, fileProblems what was wrong in it and positions
	// where each of its fields is; podFlags and modelFlags are the raw --pod
	// and --model flags, which replace pods.static and tokenizers.models when
	// given; flagsSet names the flags given and flagProblems the values they
	// could not hold. None is in the file.
	file                 string
	fileProblems         []string
	positions            map[string]position
	podFlags, modelFlags []string
	// templateFlags and formatFlags are the raw --chat-template and
	// --chat-template-content-format flags, set over tokenizers.models.
	templateFlags, formatFlags []string
	flagsSet                   []string
	flagProblems               []string
	// hubToken is the hub token read from the environment (never logged).
	hubToken string
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
	kvindex.Config `yaml:",inline"` // max_entries: --max-index-entries
	Backend        string           `yaml:"backend"` // --index-backend: memory or redis
	Redis          redisConfig      `yaml:"redis"`
}

// redisConfig is where the redis backend keeps the shared index
// (redisindex.Config). The password comes from an environment variable or
// a file, never from the config itself, and is never logged.
type redisConfig struct {
	Address      string        `yaml:"address"`       // --index-redis-addr: host:port, comma-separated seeds with cluster
	Cluster      bool          `yaml:"cluster"`       // --index-redis-cluster
	Username     string        `yaml:"username"`      // --index-redis-username
	PasswordEnv  string        `yaml:"password_env"`  // --index-redis-password-env
	PasswordFile string        `yaml:"password_file"` // --index-redis-password-file
	TLS          bool          `yaml:"tls"`           // --index-redis-tls
	TLSCAFile    string        `yaml:"tls_ca_file"`   // --index-redis-tls-ca
	KeyPrefix    string        `yaml:"key_prefix"`    // --index-redis-key-prefix
	TTL          time.Duration `yaml:"ttl"`           // --index-redis-ttl
}

type extprocConfig struct {
	extproc.Config `yaml:",inline"` // body_mode, max_body_bytes, max_streams
	TLS            tlsConfig        `yaml:"tls"`
}

// tlsConfig is TLS on the ext_proc port.
type tlsConfig struct {
	Mode           string        `yaml:"mode"`            // --grpc-tls: auto, on or off
	CertFile       string        `yaml:"cert_file"`       // --grpc-tls-cert
	KeyFile        string        `yaml:"key_file"`        // --grpc-tls-key
	ClientCAFile   string        `yaml:"client_ca_file"`  // --grpc-tls-client-ca
	ReloadInterval time.Duration `yaml:"reload_interval"` // --grpc-tls-reload-interval
}

// objectiveEntry is one InferenceObjective: a name and its priority (below
// zero: sheddable when the pods are saturated).
type objectiveEntry struct {
	Name     string `yaml:"name"`
	Priority int    `yaml:"priority"`
}

// podsConfig is the pods known without Kubernetes, and the model of pods
// that name none.
type podsConfig struct {
	DefaultModel string        `yaml:"default_model"` // --default-model
	Static       []podEntry    `yaml:"static"`        // --pod
	File         string        `yaml:"file"`          // --pods-file
	FileInterval time.Duration `yaml:"file_interval"` // --pods-file-interval
	// MetricsInterval is how often each ready pod's vLLM /metrics is read.
	MetricsInterval time.Duration `yaml:"metrics_interval"` // --pods-metrics-interval
}

// discoverySection is Kubernetes pod discovery.
type discoverySection struct {
	// Kubeconfig: a path, "in-cluster", "off", or "" for in-cluster when
	// KUBERNETES_SERVICE_HOST is set and off otherwise.
	Kubeconfig string      `yaml:"kubeconfig"` // --kubeconfig
	Namespaces []string    `yaml:"namespaces"` // --namespace
	Selector   string      `yaml:"selector"`   // --selector
	Pool       poolSection `yaml:"pool"`
}

// poolSection names the InferencePool to serve instead of the selector.
type poolSection struct {
	Name      string `yaml:"name"`      // --pool-name
	Namespace string `yaml:"namespace"` // --pool-namespace
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
		Tokenizers: tokenizersConfig{PrefixCacheBytes: tokenizer.DefaultPrefixCacheBytes, MaxTokenizeBytes: router.DefaultConfig().MaxTokenizeBytes, Hub: hubDefaults()},
		Routing:    router.DefaultConfig(),
		ExtProc:    extprocConfig{Config: extproc.DefaultConfig(), TLS: tlsConfig{Mode: "auto", ReloadInterval: 10 * time.Second}},
		Pods:       podsConfig{FileInterval: time.Second, MetricsInterval: 100 * time.Millisecond},
		Discovery:  discoverySection{Selector: discovery.DefaultConfig().Selector},
	}
}

// indexDefaults is the index's own defaults: the memory backend.
func indexDefaults() indexConfig {
	r := redisindex.DefaultConfig()
	return indexConfig{
		Config: kvindex.DefaultConfig(), Backend: "memory",
		Redis: redisConfig{
			KeyPrefix: r.Prefix, TTL: r.TTL,
		},
	}
}

// flagSpec is one of serve's flags: the config field it sets, by its yaml
// path, and its help.
type flagSpec struct{ name, path, help string }

// serveFlagTable is serve's flags that set a field of the config, in the
// order --help lists them. Only infrastructure has flags (where kvrouter
// listens and logs, finds its pods and tokenizers, hashes, and keeps its
// index, and how Envoy talks to it); the routing policy is set in the file.
var serveFlagTable = []flagSpec{
	{"admin-addr", "listen.admin", "admin HTTP server: /healthz, /readyz, /metrics, /debug/pprof/, /debug/pods, /debug/tokenizers, POST /v1/score"},
	{"grpc-addr", "listen.grpc", "Envoy ext_proc gRPC server; empty: off"},
	{"grpc-health-addr", "listen.grpc_health", "plaintext gRPC health server (the ext_proc port's health, for probes without TLS, as the reference picker's :9003); empty: off"},
	{"http-addr", "listen.http", "standalone OpenAI-compatible HTTP proxy (no Envoy needed); empty: off"},
	{"admin-auth", "admin.auth", "who may read /metrics and the debug endpoints: kubernetes (a bearer token the API server authorizes), none, or auto (kubernetes with discovery)"},
	{"admin-max-concurrent", "admin.max_concurrent", "admin requests served at once beyond the probes; more get 429"},
	{"admin-debug", "admin.debug", "serve /debug/pprof/, /debug/pods, /debug/tokenizers and POST /v1/score (behind --admin-auth)"},
	{"log-level", "log.level", "log level: debug, info, warn or error"},
	{"log-format", "log.format", "log format: json, text, or auto (text on a terminal, JSON otherwise)"},
	{"drain-delay", "shutdown.drain_delay", "on SIGTERM, how long to report not-ready before stopping, so load balancers stop sending work"},
	{"shutdown-timeout", "shutdown.timeout", "how long in-flight work may take to finish once stopping"},
	{"kubeconfig", "discovery.kubeconfig", "discover vLLM pods in Kubernetes with this kubeconfig file, \"in-cluster\" or \"off\"; default: in-cluster when KUBERNETES_SERVICE_HOST is set, else off"},
	{"namespace", "discovery.namespaces", "a namespace to discover pods in (repeatable); default: all"},
	{"selector", "discovery.selector", "the label selector of the vLLM pods to discover"},
	{"pool-name", "discovery.pool.name", "serve the ready pods of this InferencePool (inference.networking.k8s.io/v1) on its target ports, instead of --selector"},
	{"pool-namespace", "discovery.pool.namespace", "the InferencePool's namespace; default: kvrouter's own in-cluster, else \"default\""},
	{"pods-file", "pods.file", "a YAML file listing vLLM pods without Kubernetes, reloaded when it changes"},
	{"pods-file-interval", "pods.file_interval", "how often the pods file is checked for changes"},
	{"pods-metrics-interval", "pods.metrics_interval", "how often each ready pod's vLLM /metrics is read for its queue and KV use"},
	{"hf-cache", "tokenizers.hf_cache", "the Hugging Face hub cache directory tokenizers are found in and downloaded to (shared with the pods'); default: $HF_HUB_CACHE, $HF_HOME/hub, else ~/.cache/huggingface/hub"},
	{"hub-endpoint", "tokenizers.hub.endpoint", "the hub (or mirror) tokenizers missing from --hf-cache are downloaded from; $HF_ENDPOINT when not given"},
	{"hub-token-env", "tokenizers.hub.token_env", "the environment variable holding the hub token"},
	{"hub-token-file", "tokenizers.hub.token_file", "a file holding the hub token (a mounted Secret), instead of --hub-token-env; read at each download"},
	{"hub-timeout", "tokenizers.hub.timeout", "how long the download of one tokenizer file may take"},
	{"hub-offline", "tokenizers.hub.offline", "download nothing: tokenizers come from --model and --hf-cache only; $HF_HUB_OFFLINE=1 when not given"},
	{"default-model", "pods.default_model", "the model of pods that do not name one"},
	{"hash-algo", "hash.algorithm", hashAlgoHelp},
	{"hash-seed", "hash.seed", hashSeedHelp},
	{"block-size", "hash.block_size", blockSizeHelp},
	{"max-index-entries", "index.max_entries", "bound on (block, pod) index entries; about 45 bytes each"},
	{"index-backend", "index.backend", "where the index lives: memory (each replica its own), or redis (shared by the replicas through Redis or Valkey, --index-redis-*)"},
	{"index-redis-addr", "index.redis.address", "the Redis or Valkey server, host:port (with --index-redis-cluster: comma-separated seed nodes)"},
	{"index-redis-cluster", "index.redis.cluster", "the server is a Redis Cluster"},
	{"index-redis-username", "index.redis.username", "the ACL user; empty: the default user"},
	{"index-redis-password-env", "index.redis.password_env", "the environment variable holding the password"},
	{"index-redis-password-file", "index.redis.password_file", "a file holding the password (a mounted Secret)"},
	{"index-redis-tls", "index.redis.tls", "connect with TLS"},
	{"index-redis-tls-ca", "index.redis.tls_ca_file", "PEM bundle of the CAs that sign the server's certificate; empty: the system's"},
	{"index-redis-key-prefix", "index.redis.key_prefix", "the prefix of every key, so that fleets can share a server"},
	{"index-redis-ttl", "index.redis.ttl", "how long a block's key lives after its last write (Redis's maxmemory is the hard bound); 0: no TTL, maxmemory with allkeys-lfu the bound"},
	{"body-mode", "extproc.body_mode", "the request body mode Envoy's ext_proc filter uses: FULL_DUPLEX_STREAMED or BUFFERED"},
	{"max-body-bytes", "extproc.max_body_bytes", "largest request body accepted (413 beyond)"},
	{"max-streams", "extproc.max_streams", "ext_proc streams (requests in flight through Envoy) open at once; more are refused (Envoy: status_on_error)"},
	{"grpc-tls", "extproc.tls.mode", "TLS on the ext_proc port: on, off, or auto (on when discovering pods in Kubernetes)"},
	{"grpc-tls-cert", "extproc.tls.cert_file", "PEM certificate (chain) for the ext_proc port, reloaded on change; empty: self-signed"},
	{"grpc-tls-key", "extproc.tls.key_file", "PEM key of --grpc-tls-cert"},
	{"grpc-tls-client-ca", "extproc.tls.client_ca_file", "PEM bundle of client CAs: clients must present a certificate one signed (mutual TLS)"},
	{"grpc-tls-reload-interval", "extproc.tls.reload_interval", "how often the certificate files are read for changes"},
}

// serveFlags defines serve's flags on fs, each over its field of c: the
// table's, then those that set no single field (the config file, and the
// lists that replace the file's).
func serveFlags(c *config, fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&c.file, "config", "", "a YAML config file (every field: config/kvrouter.example.yaml); flags given on the command line win over it")
	for _, f := range serveFlagTable {
		v := fieldByPath(reflect.ValueOf(c).Elem(), f.path)
		if v.Kind() == reflect.String { // string and named string types (blockhash.Algorithm)
			fs.Var(stringField{v}, f.name, f.help)
			continue
		}
		switch p := v.Addr().Interface().(type) {
		case *bool:
			fs.BoolVar(p, f.name, *p, f.help)
		case *int:
			fs.IntVar(p, f.name, *p, f.help)
		case *time.Duration:
			fs.DurationVar(p, f.name, *p, f.help)
		case *[]string:
			fs.Var(&replaceList{dst: p}, f.name, f.help)
		default:
			panic(fmt.Sprintf("flag --%s: %s holds a %T", f.name, f.path, p))
		}
	}
	fs.Var(&replaceList{dst: &c.podFlags}, "pod", "a vLLM pod without Kubernetes: name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R] (repeatable; dp: data-parallel ranks behind the port, each routed to on its own; role: prefill, decode or both)")
	fs.Var(&replaceList{dst: &c.modelFlags}, "model", "where a model's tokenizer is: NAME=DIR (tokenizer.json, tokenizer_config.json), NAME=hub:ORG/REPO[@REVISION] or NAME=alias:MODEL (repeatable); other models are the hub repository of their own name")
	fs.Var(&replaceList{dst: &c.templateFlags}, "chat-template", "a model's chat template, as the pods' --chat-template: NAME=FILE, NAME=TEXT or NAME=TEMPLATE-NAME (repeatable)")
	fs.Var(&replaceList{dst: &c.formatFlags}, "chat-template-content-format", "a model's message content format, as the pods' --chat-template-content-format: NAME=auto, NAME=string or NAME=openai (repeatable)")
	removedFlags(fs, &c.flagProblems)
}

// fieldByPath is the field of the struct v whose yaml key path is path.
func fieldByPath(v reflect.Value, path string) reflect.Value {
	for key := range strings.SplitSeq(path, ".") {
		f, ok := yamlField(v, key)
		if !ok {
			panic("config: no field " + path)
		}
		v = f
	}
	return v
}

// yamlField is the field of the struct v whose yaml key is key, looked for
// in its inline structs too.
func yamlField(v reflect.Value, key string) (reflect.Value, bool) {
	for i := range v.NumField() {
		name, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		switch {
		case name == key:
			return v.Field(i), true
		case opts == "inline":
			if f, ok := yamlField(v.Field(i), key); ok {
				return f, true
			}
		}
	}
	return reflect.Value{}, false
}

// stringField is a flag over a field of any string kind.
type stringField struct{ v reflect.Value }

func (f stringField) String() string         { return f.v.String() }
func (f stringField) Set(value string) error { f.v.SetString(value); return nil }
func (f stringField) Type() string           { return "string" }

// flagFor is the serve flag that sets the config field at path; "" for
// none.
func flagFor(path string) string {
	for _, f := range serveFlagTable {
		if f.path == path {
			return f.name
		}
	}
	return ""
}

// flagPath is the config field a serve flag sets; "" for a flag that sets
// no single field.
func flagPath(name string) string {
	for _, f := range serveFlagTable {
		if f.name == name {
			return f.path
		}
	}
	return ""
}

// hashFlags defines the hash settings' flags, the same for serve and hash:
// they must equal the pods' vLLM settings.
func hashFlags(algo, seed *string, blockSize *int, fs *pflag.FlagSet) {
	fs.StringVar(algo, "hash-algo", *algo, hashAlgoHelp)
	fs.StringVar(seed, "hash-seed", *seed, hashSeedHelp)
	fs.IntVar(blockSize, "block-size", *blockSize, blockSizeHelp)
}

// The hash flags' help, the same for serve and hash.
const (
	hashAlgoHelp  = "the pods' --prefix-caching-hash-algo: sha256, sha256_cbor, xxhash or xxhash_cbor"
	hashSeedHelp  = "the pods' PYTHONHASHSEED (vLLM >= 0.30 uses \"vllm-none-hash\" when unset; the empty string is a seed too)"
	blockSizeHelp = "the pods' KV cache block size in tokens"
)

// loadConfig parses serve's command line alone, as `kvrouter serve args`
// would, for tests and tools.
func loadConfig(args []string) (config, error) {
	c := defaultConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serveFlags(&c, fs)
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
	if c.file == "" {
		return c
	}
	fc := defaultConfig()
	fc.fileProblems, fc.positions = decodeFile(c.file, &fc)
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
	fc.file, fc.flagsSet, fc.flagProblems = c.file, c.flagsSet, c.flagProblems
	return fc
}

// replaceList collects a repeated flag into dst, replacing what dst held
// (a config file's list) at its first use.
type replaceList struct {
	dst *[]string
	set bool
}

func (l *replaceList) String() string {
	if l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, " ")
}

func (l *replaceList) Set(v string) error {
	if !l.set {
		*l.dst, l.set = nil, true
	}
	*l.dst = append(*l.dst, v)
	return nil
}

func (l *replaceList) Type() string { return "strings" }

func (l *replaceList) Append(v string) error { return l.Set(v) }

func (l *replaceList) Replace(vs []string) error { //nolint:unparam // pflag.SliceValue's signature
	*l.dst, l.set = append([]string(nil), vs...), true
	return nil
}

func (l *replaceList) GetSlice() []string { return *l.dst }

// errConfig marks a configuration that cannot run: the process exits with
// status 2.
var errConfig = errors.New("bad configuration")

// problems is every configuration problem found, reported at once.
type problems struct{ list []string }

func (p *problems) add(format string, args ...any) {
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

// err returns p as an error, nil when there is no problem.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return p
}

func (p *problems) Error() string {
	var b strings.Builder
	if len(p.list) == 1 {
		b.WriteString("config: 1 problem:")
	} else {
		fmt.Fprintf(&b, "config: %d problems:", len(p.list))
	}
	for _, s := range p.list {
		b.WriteString("\n  - ")
		b.WriteString(s)
	}
	return b.String()
}

func (p *problems) Is(target error) bool { return target == errConfig }
