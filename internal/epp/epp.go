// Package epp accepts the command line of the Gateway API Inference
// Extension's Endpoint Picker (GIE v1.5.0's cmd/epp, and llm-d's router,
// which keeps its flags), so that kvrouter's image replaces the picker in
// the Helm charts that deploy one: they set the container's arguments only.
//
// Each flag maps to the kvrouter setting that does its job, by the
// setting's yaml path (Map); a flag with no kvrouter counterpart is
// accepted, and kvrouter says once at start why it changes nothing. The
// flags are hidden from `kvrouter serve --help`; docs/operations.md lists
// them.
package epp

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/spf13/pflag"
)

// Flags are the picker's flags as defined on a flag set, their values once
// it is parsed.
type Flags struct {
	fs    *pflag.FlagSet
	names map[string]bool // the picker's own, which Register defined

	grpcPort, healthPort, metricsPort, verbosity        int
	secure, pprof, metricsAuth, tracing                 bool
	poolGroup, certPath, selector, zapEncoder, zapLevel string
	configFile                                          string
	targetPorts                                         []int
	refresh, staleness, drain                           time.Duration
}

// ignored are the picker's flags that change nothing in kvrouter: whether
// each takes a value (else it is a switch), and why it changes nothing,
// what a user reads in the start log.
var ignored = map[string]struct {
	value bool
	why   string
}{
	"ha-enable-leader-election":                       {false, "kvrouter's replicas are active-active: each routes every request it gets, and every replica is ready"},
	"health-checking":                                 {false, "kvrouter's ext_proc port always serves gRPC health"},
	"enable-cert-reload":                              {false, "kvrouter reloads its certificate files whenever they change"},
	"config-text":                                     {true, "kvrouter's routing policy is not a plugins configuration; give kvrouter's own with --config"},
	"zap-devel":                                       {false, "kvrouter's logs are JSON or text, by --log-format"},
	"zap-stacktrace-level":                            {true, "kvrouter's logs carry no stack traces"},
	"zap-time-encoding":                               {true, "kvrouter's logs carry RFC 3339 times"},
	"refresh-prometheus-metrics-interval":             {true, "kvrouter computes its metrics when they are scraped"},
	"disable-endpoint-subset-filter":                  {false, "kvrouter always honors x-gateway-destination-endpoint-subset"},
	"model-server-metrics-scheme":                     {true, "kvrouter reads each pod's vLLM /metrics over HTTP on its serving port"},
	"model-server-metrics-path":                       {true, "kvrouter reads each pod's vLLM /metrics over HTTP on its serving port"},
	"model-server-metrics-port":                       {true, "kvrouter reads each pod's vLLM /metrics over HTTP on its serving port"},
	"model-server-metrics-https-insecure-skip-verify": {false, "kvrouter reads each pod's vLLM /metrics over HTTP on its serving port"},
	"total-queued-requests-metric":                    {true, "kvrouter reads vLLM's metrics by their own names"},
	"total-running-requests-metric":                   {true, "kvrouter reads vLLM's metrics by their own names"},
	"kv-cache-usage-percentage-metric":                {true, "kvrouter reads vLLM's metrics by their own names"},
	"lora-info-metric":                                {true, "kvrouter reads vLLM's metrics by their own names"},
	"cache-info-metric":                               {true, "kvrouter reads vLLM's metrics by their own names"},
	"grpc-max-recv-msg-size":                          {true, "kvrouter bounds a request's body by --max-body-bytes"},
	"grpc-max-send-msg-size":                          {true, "kvrouter bounds a request's body by --max-body-bytes"},
	"emit-endpoint-scores":                            {false, "kvrouter reports its scores on POST /v1/score and in its routing headers"},
	"enable-grpc-stream-metrics":                      {false, "kvrouter always counts its ext_proc streams"},
	"tls-min-version":                                 {true, "kvrouter's ext_proc TLS is at least TLS 1.2"},
	"tls-cipher-suites":                               {true, "kvrouter's ext_proc TLS uses Go's default cipher suites"},
	"metrics-client-ca-file":                          {true, "kvrouter guards /metrics with Kubernetes tokens (--admin-auth)"},
	"metrics-cert-dir":                                {true, "kvrouter serves /metrics in plaintext on its admin port"},
	"allow-experimental-plugins":                      {false, "kvrouter's routing policy has no plugins"},
}

// Register defines the picker's flags on fs, hidden, but for
// --pool-name and --pool-namespace, which kvrouter has as its own.
func Register(fs *pflag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	kvrouters := map[string]bool{}
	fs.VisitAll(func(fl *pflag.Flag) { kvrouters[fl.Name] = true })
	fs.IntVar(&f.grpcPort, "grpc-port", 9002, "the picker's ext_proc port: --grpc-addr :PORT")
	fs.IntVar(&f.healthPort, "grpc-health-port", 9003, "the picker's gRPC health port: --grpc-health-addr :PORT")
	fs.IntVar(&f.metricsPort, "metrics-port", 9090, "the picker's metrics port: --admin-addr :PORT")
	fs.BoolVar(&f.secure, "secure-serving", true, "TLS on the ext_proc port: --grpc-tls on or off")
	fs.StringVar(&f.certPath, "cert-path", "", "a directory holding tls.crt and tls.key: --grpc-tls-cert and --grpc-tls-key")
	fs.StringVar(&f.poolGroup, "pool-group", "inference.networking.k8s.io", "the InferencePool's API group: inference.networking.k8s.io only")
	fs.StringVar(&f.selector, "endpoint-selector", "", "the model server pods' labels, k=v,...: --selector, instead of an InferencePool")
	fs.IntSliceVar(&f.targetPorts, "endpoint-target-ports", nil, "with --endpoint-selector, the pods' serving port: discovery.serving_port")
	fs.DurationVar(&f.refresh, "refresh-metrics-interval", 50*time.Millisecond, "how often the pods' metrics are read: --pods-metrics-interval")
	fs.DurationVar(&f.staleness, "metrics-staleness-threshold", 2*time.Second, "when a pod's metrics are stale: routing.stale_metrics_after")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "how long in-flight work may take once stopping: --shutdown-timeout")
	fs.BoolVar(&f.pprof, "enable-pprof", true, "serve /debug/pprof/: --admin-debug")
	fs.BoolVar(&f.metricsAuth, "metrics-endpoint-auth", true, "guard /metrics with Kubernetes tokens: --admin-auth")
	fs.BoolVar(&f.tracing, "tracing", false, "export OpenTelemetry spans as the OTEL_* environment says: tracing.enabled")
	fs.IntVarP(&f.verbosity, "v", "v", 2, "log verbosity, 4 and more for debug: --log-level")
	fs.StringVar(&f.zapLevel, "zap-log-level", "", "log level, debug, info or error: --log-level")
	fs.StringVar(&f.zapEncoder, "zap-encoder", "", "log encoding, json or console: --log-format")
	fs.StringVar(&f.configFile, "config-file", "", "kvrouter's config file (--config); a plugins configuration is ignored")
	for name, ig := range ignored {
		if ig.value {
			fs.String(name, "", ig.why)
		} else {
			fs.Bool(name, false, ig.why)
		}
	}
	f.names = map[string]bool{}
	fs.VisitAll(func(fl *pflag.Flag) {
		if !kvrouters[fl.Name] {
			f.names[fl.Name] = true
			_ = fs.MarkHidden(fl.Name)
		}
	})
	return f
}

// Given says whether any of the picker's own flags was given: kvrouter
// then runs as the picker's drop-in (see Defaults).
func (f *Flags) Given() bool {
	given := false
	f.fs.Visit(func(fl *pflag.Flag) { given = given || f.names[fl.Name] })
	return given
}

// Defaults are the settings the picker's charts rely on without passing
// them, for kvrouter to take when it runs as the picker's drop-in and
// they are not set otherwise: the plaintext gRPC health port its probes
// ask (9003).
var Defaults = []Setting{{Flag: "grpc-health-port", Path: "listen.grpc_health", Value: ":9003"}}

// Setting is a kvrouter config field, by its yaml path, and the value one
// of the picker's flags gives it, as a flag would.
type Setting struct{ Flag, Path, Value string }

// Map turns the picker's flags given on the command line into kvrouter
// settings, notes (a flag accepted that changes nothing: why), and
// problems (a value kvrouter cannot take), each naming its flag.
func (f *Flags) Map() (settings []Setting, notes, problems []string) {
	given := func(name string) bool { return f.fs.Changed(name) }
	set := func(flag, path, value string) { settings = append(settings, Setting{flag, path, value}) }
	port := func(flag, path string, n int) {
		if n < 1 || n > 65535 {
			problems = append(problems, fmt.Sprintf("--%s: %d, want a port in [1, 65535]", flag, n))
			return
		}
		set(flag, path, ":"+strconv.Itoa(n))
	}
	if given("grpc-port") {
		port("grpc-port", "listen.grpc", f.grpcPort)
	}
	if given("grpc-health-port") {
		port("grpc-health-port", "listen.grpc_health", f.healthPort)
	}
	if given("metrics-port") {
		port("metrics-port", "listen.admin", f.metricsPort)
	}
	if given("secure-serving") {
		set("secure-serving", "extproc.tls.mode", map[bool]string{true: "on", false: "off"}[f.secure])
	}
	if given("cert-path") && f.certPath != "" {
		set("cert-path", "extproc.tls.cert_file", filepath.Join(f.certPath, "tls.crt"))
		set("cert-path", "extproc.tls.key_file", filepath.Join(f.certPath, "tls.key"))
	}
	if given("pool-group") && f.poolGroup != "inference.networking.k8s.io" {
		problems = append(problems, fmt.Sprintf("--pool-group: %q, want inference.networking.k8s.io (InferencePool v1)", f.poolGroup))
	}
	if given("endpoint-selector") {
		if f.fs.Changed("pool-name") {
			problems = append(problems, "--endpoint-selector: with --pool-name; give one")
		}
		set("endpoint-selector", "discovery.selector", f.selector)
	}
	if given("endpoint-target-ports") {
		switch {
		case len(f.targetPorts) == 0:
			problems = append(problems, "--endpoint-target-ports: empty, want the pods' serving port")
		case f.targetPorts[0] < 1 || f.targetPorts[0] > 65535:
			problems = append(problems, fmt.Sprintf("--endpoint-target-ports: %d, want a port in [1, 65535]", f.targetPorts[0]))
		default:
			set("endpoint-target-ports", "discovery.serving_port", strconv.Itoa(f.targetPorts[0]))
			if len(f.targetPorts) > 1 {
				notes = append(notes, fmt.Sprintf("--endpoint-target-ports: the pods are served on %d, the first port; an InferencePool's several target ports are served as data-parallel ranks", f.targetPorts[0]))
			}
		}
	}
	if given("refresh-metrics-interval") {
		set("refresh-metrics-interval", "pods.metrics_interval", f.refresh.String())
	}
	if given("metrics-staleness-threshold") {
		set("metrics-staleness-threshold", "routing.stale_metrics_after", f.staleness.String())
	}
	if given("drain-timeout") {
		set("drain-timeout", "shutdown.timeout", f.drain.String())
	}
	if given("enable-pprof") {
		set("enable-pprof", "admin.debug", strconv.FormatBool(f.pprof))
	}
	if given("tracing") {
		set("tracing", "tracing.enabled", strconv.FormatBool(f.tracing))
	}
	if given("metrics-endpoint-auth") {
		set("metrics-endpoint-auth", "admin.auth", map[bool]string{true: "auto", false: "none"}[f.metricsAuth])
	}
	switch {
	case given("zap-log-level"):
		if level, ok := zapLevel(f.zapLevel); ok {
			set("zap-log-level", "log.level", level)
		} else {
			problems = append(problems, fmt.Sprintf("--zap-log-level: %q, want debug, info, error, panic or an integer", f.zapLevel))
		}
	case given("v"):
		set("v", "log.level", map[bool]string{true: "debug", false: "info"}[f.verbosity >= 4])
	}
	if given("zap-encoder") {
		switch f.zapEncoder {
		case "json":
			set("zap-encoder", "log.format", "json")
		case "console":
			set("zap-encoder", "log.format", "text")
		default:
			problems = append(problems, fmt.Sprintf("--zap-encoder: %q, want json or console", f.zapEncoder))
		}
	}
	for name, ig := range ignored {
		if given(name) {
			notes = append(notes, "--"+name+": accepted, and changes nothing: "+ig.why)
		}
	}
	if given("config-file") && f.configFile != "" && !IsKVRouterConfig(f.configFile) {
		notes = append(notes, "--config-file: "+f.configFile+" is not kvrouter's config (a picker's plugins configuration?): ignored; kvrouter's policy is its own (docs/routing.md)")
	}
	return settings, notes, problems
}

// ConfigFile is --config-file when it names kvrouter's own config file,
// "" otherwise.
func (f *Flags) ConfigFile() string {
	if f.fs.Changed("config-file") && f.configFile != "" && IsKVRouterConfig(f.configFile) {
		return f.configFile
	}
	return ""
}

// IsKVRouterConfig says whether the file at path is a kvrouter config
// rather than a picker's plugins configuration (an EndpointPickerConfig,
// with apiVersion and kind at its top). A file that cannot be read is
// taken as kvrouter's: reading it then reports why.
func IsKVRouterConfig(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "apiVersion:") || strings.HasPrefix(line, "kind:") {
			return false
		}
	}
	return true
}

// zapLevel is kvrouter's log level for a picker's --zap-log-level: a name,
// or an integer verbosity (4 and more: debug).
func zapLevel(v string) (string, bool) {
	switch v {
	case "debug", "info", "error":
		return v, true
	case "panic", "dpanic", "fatal":
		return "error", true
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return map[bool]string{true: "debug", false: "info"}[n >= 4], true
	}
	return "", false
}

// Apply sets on *root (kvrouter's configuration struct) what the picker's
// flags given say (Map), and, when any was given, the Defaults the config
// has not set (set says which paths the file or a flag of kvrouter's set).
// It returns the notes and the problems, each naming its flag.
func (f *Flags) Apply(root any, set func(path string) bool) (notes, problems []string) {
	settings, notes, problems := f.Map()
	if f.Given() {
		for _, d := range Defaults {
			if !set(d.Path) {
				settings = append([]Setting{d}, settings...) // a picker flag given sets it after
			}
		}
	}
	for _, s := range settings {
		if err := conf.Set(root, s.Path, s.Value); err != nil {
			problems = append(problems, fmt.Sprintf("--%s: %v", s.Flag, err))
		}
	}
	return notes, problems
}
