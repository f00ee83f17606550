package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// config is everything `kvrouter serve` can be told: the YAML config file
// (--config) decoded over the defaults, then the flags given on the command
// line over that. Every field has a yaml key; config/kvrouter.example.yaml
// documents each one.
type config struct {
	Listen     listenConfig     `yaml:"listen"`
	Log        logConfig        `yaml:"log"`
	Shutdown   shutdownConfig   `yaml:"shutdown"`
	Hash       hashConfig       `yaml:"hash"`
	Index      indexConfig      `yaml:"index"`
	Routing    routingConfig    `yaml:"routing"`
	Tokenizers tokenizersConfig `yaml:"tokenizers"`
	ExtProc    extprocConfig    `yaml:"extproc"`
	Pods       podsConfig       `yaml:"pods"`
	Discovery  discoverySection `yaml:"discovery"`

	// file is --config and fileProblems what was wrong in it; podFlags and
	// modelFlags are the raw --pod and --model flags, which replace
	// pods.static and tokenizers.models when given. None is in the file.
	file                 string
	fileProblems         []string
	podFlags, modelFlags []string
}

// listenConfig is where the servers listen; an empty address turns a
// server off (the admin server cannot be).
type listenConfig struct {
	Admin string `yaml:"admin"` // --admin-addr
	GRPC  string `yaml:"grpc"`  // --grpc-addr
	HTTP  string `yaml:"http"`  // --http-addr
}

type logConfig struct {
	Level string `yaml:"level"` // --log-level: debug, info, warn or error
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
	MaxEntries int `yaml:"max_entries"` // --max-index-entries
}

// routingConfig is how the router weighs a pod's cached prefix against its
// load (router.Config).
type routingConfig struct {
	// PrefillTokensPerSecond is one pod's prefill speed: what an uncached
	// prompt token costs it.
	PrefillTokensPerSecond   float64 `yaml:"prefill_tokens_per_second"`   // --prefill-tokens-per-second
	PrefillAttentionPerToken float64 `yaml:"prefill_attention_per_token"` // --prefill-attention-per-token
	KVPressure               float64 `yaml:"kv_pressure"`                 // --kv-pressure
	Tolerance                float64 `yaml:"tolerance"`                   // --routing-tolerance
	// StaleMetricsAfter is how long a pod's /metrics scrapes may fail
	// before the router routes around it as if it had never answered.
	StaleMetricsAfter duration `yaml:"stale_metrics_after"` // --stale-metrics-after
}

type tokenizersConfig struct {
	Models  map[string]string `yaml:"models"`   // --model NAME=DIR
	HFCache string            `yaml:"hf_cache"` // --hf-cache
	// PrefixCacheBytes is each loaded model's prefix cache budget; 0: off.
	PrefixCacheBytes int64 `yaml:"prefix_cache_bytes"`
}

type extprocConfig struct {
	BodyMode     string `yaml:"body_mode"`      // --body-mode
	MaxBodyBytes int    `yaml:"max_body_bytes"` // --max-body-bytes
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
	Kubeconfig string   `yaml:"kubeconfig"` // --kubeconfig
	Namespaces []string `yaml:"namespaces"` // --namespace
	Selector   string   `yaml:"selector"`   // --selector
}

// defaultConfig is serve's configuration when nothing is said: vLLM's own
// defaults for the hash chain and event ports.
func defaultConfig() config {
	return config{
		Listen:     listenConfig{Admin: ":9090", GRPC: ":9002"},
		Log:        logConfig{Level: "info"},
		Shutdown:   shutdownConfig{Timeout: duration(10 * time.Second)},
		Hash:       hashConfig{Algorithm: string(blockhash.SHA256), Seed: blockhash.DefaultSeed, BlockSize: blockhash.DefaultBlockSize},
		Index:      indexConfig{MaxEntries: kvindex.DefaultConfig().MaxEntries},
		Tokenizers: tokenizersConfig{PrefixCacheBytes: tokenizer.DefaultPrefixCacheBytes},
		Routing:    routingDefaults(),
		ExtProc:    extprocConfig{BodyMode: string(extproc.FullDuplexStreamed), MaxBodyBytes: extproc.DefaultConfig().MaxBodyBytes},
		Pods:       podsConfig{FileInterval: duration(time.Second), MetricsInterval: duration(100 * time.Millisecond)},
		Discovery:  discoverySection{Selector: discovery.DefaultConfig().Selector},
	}
}

// routingDefaults is the router's own defaults.
func routingDefaults() routingConfig {
	r := router.DefaultConfig()
	return routingConfig{
		PrefillTokensPerSecond: 1 / r.PrefillSecondsPerToken, PrefillAttentionPerToken: r.PrefillAttentionPerToken,
		KVPressure: r.KVPressure, Tolerance: r.Tolerance, StaleMetricsAfter: duration(r.StaleMetricsAfter),
	}
}

func serveFlags(c *config, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", "[flags]", stderr)
	fs.StringVar(&c.file, "config", "", "a YAML config file (every field: config/kvrouter.example.yaml); flags given on the command line win over it")
	fs.StringVar(&c.Listen.Admin, "admin-addr", c.Listen.Admin, "admin HTTP server: /healthz, /readyz, /metrics, /debug/pprof/, /debug/pods, POST /v1/score")
	fs.StringVar(&c.Listen.GRPC, "grpc-addr", c.Listen.GRPC, "Envoy ext_proc gRPC server; empty: off")
	fs.StringVar(&c.Listen.HTTP, "http-addr", c.Listen.HTTP, "standalone OpenAI-compatible HTTP proxy (no Envoy needed); empty: off")
	fs.StringVar(&c.Log.Level, "log-level", c.Log.Level, "log level: debug, info, warn or error")
	fs.DurationVar((*time.Duration)(&c.Shutdown.DrainDelay), "drain-delay", time.Duration(c.Shutdown.DrainDelay), "on SIGTERM, how long to report not-ready before stopping, so load balancers stop sending work")
	fs.DurationVar((*time.Duration)(&c.Shutdown.Timeout), "shutdown-timeout", time.Duration(c.Shutdown.Timeout), "how long in-flight work may take to finish once stopping")
	fs.StringVar(&c.Discovery.Kubeconfig, "kubeconfig", c.Discovery.Kubeconfig, "discover vLLM pods in Kubernetes with this kubeconfig file, \"in-cluster\" or \"off\"; default: in-cluster when KUBERNETES_SERVICE_HOST is set, else off")
	fs.Var(&replaceList{dst: &c.Discovery.Namespaces}, "namespace", "a namespace to discover pods in (repeatable); default: all")
	fs.StringVar(&c.Discovery.Selector, "selector", c.Discovery.Selector, "the label selector of the vLLM pods to discover")
	fs.Var(&replaceList{dst: &c.podFlags}, "pod", "a vLLM pod without Kubernetes: name=ip:port[,model=M][,events=PORT][,replay=PORT] (repeatable)")
	fs.StringVar(&c.Pods.File, "pods-file", c.Pods.File, "a YAML file listing vLLM pods without Kubernetes, reloaded when it changes")
	fs.DurationVar((*time.Duration)(&c.Pods.FileInterval), "pods-file-interval", time.Duration(c.Pods.FileInterval), "how often the pods file is checked for changes")
	fs.DurationVar((*time.Duration)(&c.Pods.MetricsInterval), "pods-metrics-interval", time.Duration(c.Pods.MetricsInterval), "how often each ready pod's vLLM /metrics is read for its queue and KV use")
	fs.Var(&replaceList{dst: &c.modelFlags}, "model", "a model's tokenizer directory (tokenizer.json, tokenizer_config.json): NAME=DIR (repeatable)")
	fs.StringVar(&c.Tokenizers.HFCache, "hf-cache", c.Tokenizers.HFCache, "a Hugging Face hub cache directory searched for tokenizers of other models")
	fs.StringVar(&c.Pods.DefaultModel, "default-model", c.Pods.DefaultModel, "the model of pods that do not name one")
	fs.StringVar(&c.Hash.Algorithm, "hash-algo", c.Hash.Algorithm, "the pods' --prefix-caching-hash-algo: sha256 or sha256_cbor")
	fs.StringVar(&c.Hash.Seed, "hash-seed", c.Hash.Seed, "the pods' PYTHONHASHSEED (vLLM >= 0.30 uses \"vllm-none-hash\" when unset)")
	fs.IntVar(&c.Hash.BlockSize, "block-size", c.Hash.BlockSize, "the pods' KV cache block size in tokens")
	fs.IntVar(&c.Index.MaxEntries, "max-index-entries", c.Index.MaxEntries, "bound on (block, pod) index entries; about 45 bytes each")
	fs.Float64Var(&c.Routing.PrefillTokensPerSecond, "prefill-tokens-per-second", c.Routing.PrefillTokensPerSecond, "one pod's prefill speed: what an uncached prompt token costs it")
	fs.Float64Var(&c.Routing.PrefillAttentionPerToken, "prefill-attention-per-token", c.Routing.PrefillAttentionPerToken, "the prefill surcharge per token of context: a token prefilled after c others costs 1 + c × this")
	fs.Float64Var(&c.Routing.KVPressure, "kv-pressure", c.Routing.KVPressure, "how much more an uncached prompt token costs as the pods' KV caches fill (0: nothing)")
	fs.Float64Var(&c.Routing.Tolerance, "routing-tolerance", c.Routing.Tolerance, "pods predicted within this fraction of the best are equal; one is picked at random")
	fs.DurationVar((*time.Duration)(&c.Routing.StaleMetricsAfter), "stale-metrics-after", time.Duration(c.Routing.StaleMetricsAfter), "how long a pod's /metrics may fail before it is routed around while a pod with fresh metrics serves its model (0: never; a pod never scraped is always)")
	fs.StringVar(&c.ExtProc.BodyMode, "body-mode", c.ExtProc.BodyMode, "the request body mode Envoy's ext_proc filter uses: FULL_DUPLEX_STREAMED or BUFFERED")
	fs.IntVar(&c.ExtProc.MaxBodyBytes, "max-body-bytes", c.ExtProc.MaxBodyBytes, "largest request body accepted (413 beyond)")
	return fs
}

// loadConfig reads serve's flags and, when --config names one, its config
// file: the file over the defaults, then the flags given on the command line
// over the file. A bad flag is a usage error; a bad file or a bad value is
// reported by validate with every other problem.
func loadConfig(args []string, stderr io.Writer) (config, error) {
	c := defaultConfig()
	fs := serveFlags(&c, stderr)
	if err := parseNoArgs(fs, args); err != nil {
		return c, err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil && flagSet(fs, "log-level") {
		fmt.Fprintf(stderr, "kvrouter serve: invalid -log-level %q: want debug, info, warn or error\n", c.Log.Level)
		fs.Usage()
		return c, errUsage
	}
	if c.file == "" {
		return c, nil
	}
	fc := defaultConfig()
	fileProblems := decodeFile(c.file, &fc)
	// The same arguments again, over the file: they parsed once already.
	if err := serveFlags(&fc, io.Discard).Parse(args); err != nil {
		return c, fmt.Errorf("serve: flags over %s: %w", c.file, err)
	}
	fc.fileProblems = fileProblems
	return fc, nil
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// unknownField rewrites the YAML decoder's complaint about a field that
// names Go types into one that names the field.
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// decodeFile decodes a YAML file strictly into v and returns what was wrong
// with it: an unknown field, a value of the wrong type, a second document.
// The fields without a problem are decoded all the same.
func decodeFile(path string, v any) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	return decodeYAML(path, data, v)
}

func decodeYAML(path string, data []byte, v any) []string {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil // an empty file: nothing said
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		out := make([]string, 0, len(te.Errors))
		for _, e := range te.Errors {
			out = append(out, path+": "+unknownField.ReplaceAllString(e, `unknown field "$1"`))
		}
		return out
	}
	if err != nil {
		return []string{path + ": " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return []string{path + ": want a single YAML document"}
	}
	return nil
}

// duration is a time.Duration written in YAML as a string such as "1.5s";
// a bare number is refused (is 5 seconds or nanoseconds?) except 0.
type duration time.Duration

// UnmarshalYAML reports a bad value as a *yaml.TypeError, so decoding goes
// on and every problem of the file is listed.
func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Value == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" || err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration such as \"1.5s\" or \"2m\"", n.Line, n.Value)}}
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
