package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"

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
	Hash       hashConfig       `yaml:"hash"`
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
	DrainDelay duration `yaml:"drain_delay"` // --drain-delay
	Timeout    duration `yaml:"timeout"`     // --shutdown-timeout
}

// hashConfig must equal the pods' vLLM settings.
type hashConfig struct {
	Algorithm string `yaml:"algorithm"`  // --hash-algo
	Seed      string `yaml:"seed"`       // --hash-seed
	BlockSize int    `yaml:"block_size"` // --block-size
}

type indexConfig struct {
	MaxEntries int         `yaml:"max_entries"` // --max-index-entries
	Backend    string      `yaml:"backend"`     // --index-backend: memory or redis
	Redis      redisConfig `yaml:"redis"`
}

// redisConfig is where the redis backend keeps the shared index
// (redisindex.Config). The password comes from an environment variable or
// a file, never from the config itself, and is never logged.
type redisConfig struct {
	Address      string   `yaml:"address"`       // --index-redis-addr: host:port, comma-separated seeds with cluster
	Cluster      bool     `yaml:"cluster"`       // --index-redis-cluster
	Username     string   `yaml:"username"`      // --index-redis-username
	PasswordEnv  string   `yaml:"password_env"`  // --index-redis-password-env
	PasswordFile string   `yaml:"password_file"` // --index-redis-password-file
	TLS          bool     `yaml:"tls"`           // --index-redis-tls
	TLSCAFile    string   `yaml:"tls_ca_file"`   // --index-redis-tls-ca
	KeyPrefix    string   `yaml:"key_prefix"`    // --index-redis-key-prefix
	TTL          duration `yaml:"ttl"`           // --index-redis-ttl
	LeaseTTL     duration `yaml:"lease_ttl"`     // --index-redis-lease-ttl
	Timeout      duration `yaml:"timeout"`       // --index-redis-timeout
	LocalView    bool     `yaml:"local_view"`    // --index-redis-local-view
	ShareLoad    bool     `yaml:"share_load"`    // --index-redis-share-load
	ShareHomes   bool     `yaml:"share_homes"`   // --index-redis-share-homes
	HomeSync     duration `yaml:"home_sync"`     // --index-redis-home-sync
}

type extprocConfig struct {
	BodyMode     string    `yaml:"body_mode"`      // --body-mode
	MaxBodyBytes int       `yaml:"max_body_bytes"` // --max-body-bytes
	MaxStreams   int       `yaml:"max_streams"`    // --max-streams
	TLS          tlsConfig `yaml:"tls"`
}

// tlsConfig is TLS on the ext_proc port.
type tlsConfig struct {
	Mode           string   `yaml:"mode"`            // --grpc-tls: auto, on or off
	CertFile       string   `yaml:"cert_file"`       // --grpc-tls-cert
	KeyFile        string   `yaml:"key_file"`        // --grpc-tls-key
	ClientCAFile   string   `yaml:"client_ca_file"`  // --grpc-tls-client-ca
	ReloadInterval duration `yaml:"reload_interval"` // --grpc-tls-reload-interval
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
	DefaultModel string     `yaml:"default_model"` // --default-model
	Static       []podEntry `yaml:"static"`        // --pod
	File         string     `yaml:"file"`          // --pods-file
	FileInterval duration   `yaml:"file_interval"` // --pods-file-interval
	// MetricsInterval is how often each ready pod's vLLM /metrics is read.
	MetricsInterval duration `yaml:"metrics_interval"` // --pods-metrics-interval
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
		Shutdown:   shutdownConfig{Timeout: duration(10 * time.Second)},
		Hash:       hashConfig{Algorithm: string(blockhash.SHA256), Seed: blockhash.DefaultSeed, BlockSize: blockhash.DefaultBlockSize},
		Index:      indexDefaults(),
		Tokenizers: tokenizersConfig{PrefixCacheBytes: tokenizer.DefaultPrefixCacheBytes, MaxTokenizeBytes: router.DefaultConfig().MaxTokenizeBytes, Hub: hubDefaults()},
		Routing:    router.DefaultConfig(),
		ExtProc: extprocConfig{
			BodyMode: string(extproc.FullDuplexStreamed), MaxBodyBytes: extproc.DefaultConfig().MaxBodyBytes, MaxStreams: extproc.DefaultConfig().MaxStreams,
			TLS: tlsConfig{Mode: "auto", ReloadInterval: duration(10 * time.Second)},
		},
		Pods:      podsConfig{FileInterval: duration(time.Second), MetricsInterval: duration(100 * time.Millisecond)},
		Discovery: discoverySection{Selector: discovery.DefaultConfig().Selector},
	}
}

// indexDefaults is the index's own defaults: the memory backend.
func indexDefaults() indexConfig {
	r := redisindex.DefaultConfig()
	return indexConfig{
		MaxEntries: kvindex.DefaultConfig().MaxEntries, Backend: "memory",
		Redis: redisConfig{
			KeyPrefix: r.Prefix, TTL: duration(r.TTL), LeaseTTL: duration(r.LeaseTTL), Timeout: duration(r.Timeout),
			LocalView: !r.NoLocalView,
			ShareLoad: !r.NoSharedLoad, ShareHomes: !r.NoSharedHomes, HomeSync: duration(r.HomeSync),
		},
	}
}

// serveFlags defines serve's flags on fs, each over its field of c.
func serveFlags(c *config, fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&c.file, "config", "", "a YAML config file (every field: config/kvrouter.example.yaml); flags given on the command line win over it")
	fs.StringVar(&c.Listen.Admin, "admin-addr", c.Listen.Admin, "admin HTTP server: /healthz, /readyz, /metrics, /debug/pprof/, /debug/pods, /debug/tokenizers, POST /v1/score")
	fs.StringVar(&c.Listen.GRPC, "grpc-addr", c.Listen.GRPC, "Envoy ext_proc gRPC server; empty: off")
	fs.StringVar(&c.Listen.GRPCHealth, "grpc-health-addr", c.Listen.GRPCHealth, "plaintext gRPC health server (the ext_proc port's health, for probes without TLS, as the reference picker's :9003); empty: off")
	fs.StringVar(&c.Listen.HTTP, "http-addr", c.Listen.HTTP, "standalone OpenAI-compatible HTTP proxy (no Envoy needed); empty: off")
	fs.StringVar(&c.Admin.Auth, "admin-auth", c.Admin.Auth, "who may read /metrics and the debug endpoints: kubernetes (a bearer token the API server authorizes), none, or auto (kubernetes with discovery)")
	fs.IntVar(&c.Admin.MaxConcurrent, "admin-max-concurrent", c.Admin.MaxConcurrent, "admin requests served at once beyond the probes; more get 429")
	fs.BoolVar(&c.Admin.Debug, "admin-debug", c.Admin.Debug, "serve /debug/pprof/, /debug/pods, /debug/tokenizers and POST /v1/score (behind --admin-auth)")
	fs.StringVar(&c.Log.Level, "log-level", c.Log.Level, "log level: debug, info, warn or error")
	fs.StringVar(&c.Log.Format, "log-format", c.Log.Format, "log format: json, text, or auto (text on a terminal, JSON otherwise)")
	fs.DurationVar((*time.Duration)(&c.Shutdown.DrainDelay), "drain-delay", time.Duration(c.Shutdown.DrainDelay), "on SIGTERM, how long to report not-ready before stopping, so load balancers stop sending work")
	fs.DurationVar((*time.Duration)(&c.Shutdown.Timeout), "shutdown-timeout", time.Duration(c.Shutdown.Timeout), "how long in-flight work may take to finish once stopping")
	fs.StringVar(&c.Discovery.Kubeconfig, "kubeconfig", c.Discovery.Kubeconfig, "discover vLLM pods in Kubernetes with this kubeconfig file, \"in-cluster\" or \"off\"; default: in-cluster when KUBERNETES_SERVICE_HOST is set, else off")
	fs.Var(&replaceList{dst: &c.Discovery.Namespaces}, "namespace", "a namespace to discover pods in (repeatable); default: all")
	fs.StringVar(&c.Discovery.Selector, "selector", c.Discovery.Selector, "the label selector of the vLLM pods to discover")
	fs.StringVar(&c.Discovery.Pool.Name, "pool-name", c.Discovery.Pool.Name, "serve the ready pods of this InferencePool (inference.networking.k8s.io/v1) on its target ports, instead of --selector")
	fs.StringVar(&c.Discovery.Pool.Namespace, "pool-namespace", c.Discovery.Pool.Namespace, "the InferencePool's namespace; default: kvrouter's own in-cluster, else \"default\"")
	fs.Var(&replaceList{dst: &c.podFlags}, "pod", "a vLLM pod without Kubernetes: name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R] (repeatable; dp: data-parallel ranks behind the port, each routed to on its own; role: prefill, decode or both)")
	fs.StringVar(&c.Pods.File, "pods-file", c.Pods.File, "a YAML file listing vLLM pods without Kubernetes, reloaded when it changes")
	fs.DurationVar((*time.Duration)(&c.Pods.FileInterval), "pods-file-interval", time.Duration(c.Pods.FileInterval), "how often the pods file is checked for changes")
	fs.DurationVar((*time.Duration)(&c.Pods.MetricsInterval), "pods-metrics-interval", time.Duration(c.Pods.MetricsInterval), "how often each ready pod's vLLM /metrics is read for its queue and KV use")
	fs.Var(&replaceList{dst: &c.modelFlags}, "model", "where a model's tokenizer is: NAME=DIR (tokenizer.json, tokenizer_config.json), NAME=hub:ORG/REPO[@REVISION] or NAME=alias:MODEL (repeatable); other models are the hub repository of their own name")
	fs.Var(&replaceList{dst: &c.templateFlags}, "chat-template", "a model's chat template, as the pods' --chat-template: NAME=FILE, NAME=TEXT or NAME=TEMPLATE-NAME (repeatable)")
	fs.Var(&replaceList{dst: &c.formatFlags}, "chat-template-content-format", "a model's message content format, as the pods' --chat-template-content-format: NAME=auto, NAME=string or NAME=openai (repeatable)")
	fs.StringVar(&c.Tokenizers.HFCache, "hf-cache", c.Tokenizers.HFCache, "the Hugging Face hub cache directory tokenizers are found in and downloaded to (shared with the pods'); default: $HF_HUB_CACHE, $HF_HOME/hub, else ~/.cache/huggingface/hub")
	fs.StringVar(&c.Tokenizers.Hub.Endpoint, "hub-endpoint", c.Tokenizers.Hub.Endpoint, "the hub (or mirror) tokenizers missing from --hf-cache are downloaded from; $HF_ENDPOINT when not given")
	fs.StringVar(&c.Tokenizers.Hub.TokenEnv, "hub-token-env", c.Tokenizers.Hub.TokenEnv, "the environment variable holding the hub token")
	fs.StringVar(&c.Tokenizers.Hub.TokenFile, "hub-token-file", c.Tokenizers.Hub.TokenFile, "a file holding the hub token (a mounted Secret), instead of --hub-token-env; read at each download")
	fs.DurationVar((*time.Duration)(&c.Tokenizers.Hub.Timeout), "hub-timeout", time.Duration(c.Tokenizers.Hub.Timeout), "how long the download of one tokenizer file may take")
	fs.BoolVar(&c.Tokenizers.Hub.Offline, "hub-offline", c.Tokenizers.Hub.Offline, "download nothing: tokenizers come from --model and --hf-cache only; $HF_HUB_OFFLINE=1 when not given")
	fs.StringVar(&c.Pods.DefaultModel, "default-model", c.Pods.DefaultModel, "the model of pods that do not name one")
	hashFlags(&c.Hash.Algorithm, &c.Hash.Seed, &c.Hash.BlockSize, fs)
	removedFlags(fs, &c.flagProblems)
	fs.IntVar(&c.Index.MaxEntries, "max-index-entries", c.Index.MaxEntries, "bound on (block, pod) index entries; about 45 bytes each")
	fs.StringVar(&c.Index.Backend, "index-backend", c.Index.Backend, "where the index lives: memory (each replica its own), or redis (shared by the replicas through Redis or Valkey, --index-redis-*)")
	r := &c.Index.Redis
	fs.StringVar(&r.Address, "index-redis-addr", r.Address, "the Redis or Valkey server, host:port (with --index-redis-cluster: comma-separated seed nodes)")
	fs.BoolVar(&r.Cluster, "index-redis-cluster", r.Cluster, "the server is a Redis Cluster")
	fs.StringVar(&r.Username, "index-redis-username", r.Username, "the ACL user; empty: the default user")
	fs.StringVar(&r.PasswordEnv, "index-redis-password-env", r.PasswordEnv, "the environment variable holding the password")
	fs.StringVar(&r.PasswordFile, "index-redis-password-file", r.PasswordFile, "a file holding the password (a mounted Secret)")
	fs.BoolVar(&r.TLS, "index-redis-tls", r.TLS, "connect with TLS")
	fs.StringVar(&r.TLSCAFile, "index-redis-tls-ca", r.TLSCAFile, "PEM bundle of the CAs that sign the server's certificate; empty: the system's")
	fs.StringVar(&r.KeyPrefix, "index-redis-key-prefix", r.KeyPrefix, "the prefix of every key, so that fleets can share a server")
	fs.DurationVar((*time.Duration)(&r.TTL), "index-redis-ttl", time.Duration(r.TTL), "how long a block's key lives after its last write (Redis's maxmemory is the hard bound); 0: no TTL, maxmemory with allkeys-lfu the bound")
	fs.DurationVar((*time.Duration)(&r.LeaseTTL), "index-redis-lease-ttl", time.Duration(r.LeaseTTL), "how long a pod's writer lease lasts unrenewed: a dead writer's pods are taken over within about 4/3 of it")
	fs.BoolVar(&r.LocalView, "index-redis-local-view", r.LocalView, "keep this replica's own view of the index too (memory as the memory backend): routed on while Redis is unreachable, and copied into Redis when it takes a pod's lease; off: load routing meanwhile, and little memory")
	fs.BoolVar(&r.ShareLoad, "index-redis-share-load", r.ShareLoad, "share the in-flight prefill each replica routed to each pod through Redis, so that every replica sees the queue the others built; off: each counts only its own")
	fs.BoolVar(&r.ShareHomes, "index-redis-share-homes", r.ShareHomes, "share the prefixes' home pods (routing.homes) and the prompts under them through Redis every --index-redis-home-sync, so that the replicas home each prefix on one pod; off: each keeps its own, and homes step aside while other replicas route to the pods")
	fs.DurationVar((*time.Duration)(&r.HomeSync), "index-redis-home-sync", time.Duration(r.HomeSync), "how often each replica writes the homes it set or used and reads the other replicas' (--index-redis-share-homes): one pipelined round trip per model; longer, the replicas place prefixes apart for longer; at least 50ms, at most --index-redis-lease-ttl")
	fs.DurationVar((*time.Duration)(&r.Timeout), "index-redis-timeout", time.Duration(r.Timeout), "the longest one round trip to Redis may take before Redis is taken for down and matches read the local view")
	fs.StringVar(&c.ExtProc.BodyMode, "body-mode", c.ExtProc.BodyMode, "the request body mode Envoy's ext_proc filter uses: FULL_DUPLEX_STREAMED or BUFFERED")
	fs.IntVar(&c.ExtProc.MaxBodyBytes, "max-body-bytes", c.ExtProc.MaxBodyBytes, "largest request body accepted (413 beyond)")
	fs.IntVar(&c.ExtProc.MaxStreams, "max-streams", c.ExtProc.MaxStreams, "ext_proc streams (requests in flight through Envoy) open at once; more are refused (Envoy: status_on_error)")
	fs.StringVar(&c.ExtProc.TLS.Mode, "grpc-tls", c.ExtProc.TLS.Mode, "TLS on the ext_proc port: on, off, or auto (on when discovering pods in Kubernetes)")
	fs.StringVar(&c.ExtProc.TLS.CertFile, "grpc-tls-cert", c.ExtProc.TLS.CertFile, "PEM certificate (chain) for the ext_proc port, reloaded on change; empty: self-signed")
	fs.StringVar(&c.ExtProc.TLS.KeyFile, "grpc-tls-key", c.ExtProc.TLS.KeyFile, "PEM key of --grpc-tls-cert")
	fs.StringVar(&c.ExtProc.TLS.ClientCAFile, "grpc-tls-client-ca", c.ExtProc.TLS.ClientCAFile, "PEM bundle of client CAs: clients must present a certificate one signed (mutual TLS)")
	fs.DurationVar((*time.Duration)(&c.ExtProc.TLS.ReloadInterval), "grpc-tls-reload-interval", time.Duration(c.ExtProc.TLS.ReloadInterval), "how often the certificate files are read for changes")
}

// hashFlags defines the hash settings' flags, the same for serve and hash:
// they must equal the pods' vLLM settings.
func hashFlags(algo, seed *string, blockSize *int, fs *pflag.FlagSet) {
	fs.StringVar(algo, "hash-algo", *algo, "the pods' --prefix-caching-hash-algo: sha256, sha256_cbor, xxhash or xxhash_cbor")
	fs.StringVar(seed, "hash-seed", *seed, "the pods' PYTHONHASHSEED (vLLM >= 0.30 uses \"vllm-none-hash\" when unset; the empty string is a seed too)")
	fs.IntVar(blockSize, "block-size", *blockSize, "the pods' KV cache block size in tokens")
}

// flagPaths names the config field each serve flag sets, so a problem with
// a value names where it came from; --config, --pod, --model,
// --chat-template and --chat-template-content-format have none.
var flagPaths = map[string]string{
	"admin-addr": "listen.admin", "grpc-addr": "listen.grpc", "grpc-health-addr": "listen.grpc_health", "http-addr": "listen.http",
	"log-level": "log.level", "log-format": "log.format", "admin-auth": "admin.auth", "admin-debug": "admin.debug", "admin-max-concurrent": "admin.max_concurrent",
	"drain-delay": "shutdown.drain_delay", "shutdown-timeout": "shutdown.timeout",
	"kubeconfig": "discovery.kubeconfig", "namespace": "discovery.namespaces", "selector": "discovery.selector",
	"pool-name": "discovery.pool.name", "pool-namespace": "discovery.pool.namespace",
	"pods-file": "pods.file", "pods-file-interval": "pods.file_interval", "pods-metrics-interval": "pods.metrics_interval",
	"default-model": "pods.default_model", "hf-cache": "tokenizers.hf_cache",
	"hub-endpoint": "tokenizers.hub.endpoint", "hub-token-env": "tokenizers.hub.token_env", "hub-token-file": "tokenizers.hub.token_file",
	"hub-timeout": "tokenizers.hub.timeout", "hub-offline": "tokenizers.hub.offline",
	"hash-algo": "hash.algorithm", "hash-seed": "hash.seed", "block-size": "hash.block_size",
	"max-index-entries": "index.max_entries", "index-backend": "index.backend",
	"index-redis-addr": "index.redis.address", "index-redis-cluster": "index.redis.cluster", "index-redis-username": "index.redis.username",
	"index-redis-password-env": "index.redis.password_env", "index-redis-password-file": "index.redis.password_file",
	"index-redis-tls": "index.redis.tls", "index-redis-tls-ca": "index.redis.tls_ca_file", "index-redis-key-prefix": "index.redis.key_prefix",
	"index-redis-ttl": "index.redis.ttl", "index-redis-local-view": "index.redis.local_view", "index-redis-share-load": "index.redis.share_load", "index-redis-share-homes": "index.redis.share_homes", "index-redis-home-sync": "index.redis.home_sync", "index-redis-lease-ttl": "index.redis.lease_ttl", "index-redis-timeout": "index.redis.timeout",
	"body-mode": "extproc.body_mode", "max-body-bytes": "extproc.max_body_bytes", "max-streams": "extproc.max_streams",
	"grpc-tls": "extproc.tls.mode", "grpc-tls-cert": "extproc.tls.cert_file", "grpc-tls-key": "extproc.tls.key_file",
	"grpc-tls-client-ca": "extproc.tls.client_ca_file", "grpc-tls-reload-interval": "extproc.tls.reload_interval",
}

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

// position is where a value is in a YAML file.
type position struct{ line, column int }

// decodeFile decodes a YAML file strictly into v and returns what was wrong
// with it (an unknown field, a value of the wrong type, a syntax error, a
// second document), each with its line, column and field path, and where
// each field's value is. The fields without a problem are decoded all the
// same.
func decodeFile(path string, v any) ([]string, map[string]position) {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}, nil
	}
	return decodeYAML(path, data, v)
}

func decodeYAML(path string, data []byte, v any) ([]string, map[string]position) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []string{yamlProblem(path, err, nil)}, nil
	}
	where := map[string]position{}
	paths := map[position]string{}
	if len(doc.Content) == 1 {
		walkYAML(doc.Content[0], "", where, paths)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil, where // an empty file: nothing said
	}
	if err != nil {
		var le *yaml.LoadErrors
		if errors.As(err, &le) {
			out := make([]string, 0, len(le.Errors))
			for _, e := range le.Errors {
				out = append(out, yamlProblem(path, e, paths))
			}
			return out, where
		}
		return []string{yamlProblem(path, err, paths)}, where
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return []string{fmt.Sprintf("%s:%d:%d: want a single YAML document", path, extra.Line, extra.Column)}, where
	}
	return nil, where
}

// walkYAML records the position of every value under n, and the path of
// every key and value position.
func walkYAML(n *yaml.Node, path string, where map[string]position, paths map[position]string) {
	at := position{n.Line, n.Column}
	if path != "" {
		where[path] = at
		paths[at] = path
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			paths[position{k.Line, k.Column}] = p
			walkYAML(val, p, where, paths)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walkYAML(c, fmt.Sprintf("%s[%d]", path, i), where, paths)
		}
	}
}

// yamlTypeWords are the YAML decoder's words for what a field holds, in a
// user's.
var (
	unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	cannotHold   = regexp.MustCompile("^cannot (?:construct|unmarshal) !!(\\w+)(?: `(.*)`)? into (\\S+)$")
	yamlPrefix   = regexp.MustCompile(`^(?:yaml: )?(?:unmarshal errors: )?(?:line \d+: )?`)
)

// yamlProblem says one YAML error as FILE:LINE:COLUMN: PATH: what is wrong,
// never in Go's words.
func yamlProblem(file string, err error, paths map[position]string) string {
	msg, at := err.Error(), position{}
	var le *yaml.LoadError
	if errors.As(err, &le) {
		msg, at = le.Message, position{le.Mark.Line, le.Mark.Column}
	}
	for range 3 { // a field's own UnmarshalYAML error arrives wrapped
		msg = yamlPrefix.ReplaceAllString(msg, "")
	}
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		msg = "unknown field"
		if why, ok := removedKeys[paths[at]]; ok {
			msg = why
		}
	} else if m := cannotHold.FindStringSubmatch(msg); m != nil {
		got := map[string]string{"seq": "a list", "map": "a mapping", "null": "nothing"}[m[1]]
		if got == "" {
			got = strconv.Quote(m[2])
		}
		msg = fmt.Sprintf("%s, want %s", got, goTypeWords(m[3]))
	}
	where := file
	if at.line > 0 {
		where = fmt.Sprintf("%s:%d:%d", file, at.line, at.column)
	}
	if p, ok := paths[at]; ok {
		return where + ": " + p + ": " + msg
	}
	return where + ": " + msg
}

// goTypeWords says what a Go type holds, as YAML.
func goTypeWords(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "main."):
		return "a mapping"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case t == "time.Duration":
		return `a duration such as "1.5s" or "2m"`
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "another kind of value"
}

// duration is a time.Duration written in YAML as a string such as "1.5s";
// a bare number is refused (is 5 seconds or nanoseconds?) except 0.
type duration time.Duration

// UnmarshalYAML refuses a bad value; the decoder goes on, so every problem
// of the file is listed.
func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Value == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" || err != nil {
		return fmt.Errorf("%q, want a duration such as \"1.5s\" or \"2m\"", n.Value) // the decoder adds where
	}
	*d = duration(v)
	return nil
}

func (d duration) String() string { return time.Duration(d).String() }

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
