package discovery

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Settings is discovery as kvrouter's config file states it (the discovery
// section); Resolve turns it into a Config.
type Settings struct {
	// Kubeconfig: a path, "in-cluster", "off", or "" for in-cluster when
	// running in a Kubernetes pod and off otherwise.
	Kubeconfig string   `yaml:"kubeconfig"`
	Namespaces []string `yaml:"namespaces"` // empty: all
	Selector   string   `yaml:"selector"`   // the label selector of the vLLM pods
	// ServingPort is the OpenAI server port of pods that name none (by the
	// kvrouter.io/port annotation or a container port named "http").
	ServingPort int `yaml:"serving_port"`
	// Pool names the InferencePool to serve instead of the selector.
	Pool struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"` // default: kvrouter's own in-cluster, else "default"
	} `yaml:"pool"`
}

// DefaultSettings is DefaultConfig's selector, the kubeconfig chosen by
// where kvrouter runs.
func DefaultSettings() Settings {
	d := DefaultConfig()
	return Settings{Selector: d.Selector, ServingPort: d.ServingPort}
}

// Off as the kubeconfig turns discovery off.
const Off = "off"

// ServiceAccountNamespace is the file that holds the namespace of an
// in-cluster pod.
var ServiceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Kubeconfig applies the kubeconfig's default as kubectl does: $KUBECONFIG
// (env; a list of files is merged), else in-cluster when the process runs
// in a Kubernetes pod (serviceHost is KUBERNETES_SERVICE_HOST), else off.
// It returns "" for off.
func Kubeconfig(setting, env, serviceHost string) string {
	switch {
	case setting == Off:
		return ""
	case setting != "":
		return setting
	case env != "":
		return env
	case serviceHost != "":
		return InCluster
	}
	return ""
}

// Resolve checks s, every problem at once, each starting with its key, and
// returns discovery's Config for pods that name no model of their own to
// serve defaultModel; env and serviceHost are $KUBECONFIG and
// $KUBERNETES_SERVICE_HOST (Kubeconfig). Its Kubeconfig is "" when
// discovery is off; it is then checked no further.
func (s Settings) Resolve(env, serviceHost, defaultModel string) (Config, error) {
	var errs []error
	cfg := DefaultConfig()
	cfg.Kubeconfig = Kubeconfig(s.Kubeconfig, env, serviceHost)
	cfg.Namespaces, cfg.DefaultModel, cfg.Selector, cfg.ServingPort = s.Namespaces, defaultModel, s.Selector, s.ServingPort
	if s.ServingPort < 1 || s.ServingPort > 65535 {
		errs = append(errs, fmt.Errorf("serving_port: %d, want a port in [1, 65535]", s.ServingPort))
	}
	for i, ns := range s.Namespaces {
		if ns == "" {
			errs = append(errs, fmt.Errorf("namespaces[%d]: empty", i))
		}
	}
	switch {
	case s.Pool.Name != "" && cfg.Kubeconfig == "":
		errs = append(errs, fmt.Errorf("pool.name: %q needs Kubernetes discovery, which is off (kubeconfig)", s.Pool.Name))
	case s.Pool.Name == "" && s.Pool.Namespace != "":
		errs = append(errs, fmt.Errorf("pool.namespace: %q without pool.name", s.Pool.Namespace))
	case s.Pool.Name != "":
		cfg.Pool = PoolRef{Name: s.Pool.Name, Namespace: s.Pool.Namespace}
		if cfg.Pool.Namespace == "" {
			cfg.Pool.Namespace = ownNamespace(cfg.Kubeconfig)
		}
	}
	if err := cfg.Validate(); cfg.Kubeconfig != "" && len(errs) == 0 && err != nil {
		errs = append(errs, err)
	}
	return cfg, errors.Join(errs...)
}

// ownNamespace is kvrouter's own namespace in-cluster, else "default" (as
// the reference picker's).
func ownNamespace(kubeconfig string) string {
	if kubeconfig == InCluster {
		if b, err := os.ReadFile(ServiceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b))
		}
	}
	return "default"
}
