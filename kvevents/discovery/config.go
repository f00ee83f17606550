package discovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/kube"
	"k8s.io/apimachinery/pkg/labels"
)

// InCluster as Config.Kubeconfig uses the pod's service account.
const InCluster = kube.InCluster

// Config is what discovery watches and how it reads pods.
type Config struct {
	// Kubeconfig is a kubeconfig file path, or InCluster.
	Kubeconfig string
	// Namespaces to watch; empty watches all.
	Namespaces []string
	// Selector is the label selector of the vLLM pods.
	Selector string
	// DefaultModel is the model of pods that name none; empty skips them.
	DefaultModel string
	// ServingPort is the OpenAI server port of pods that name none.
	ServingPort int
	// EventPort and ReplayPort are the KV event ports of pods that name
	// none; 0 leaves them to the subscriber, which asks the pod
	// (/kv_event_sources) or takes vLLM's defaults.
	EventPort, ReplayPort int
	// Resync replays every pod to the consumer this often; 0: never.
	Resync time.Duration
	// Pool, when its Name is set, is the InferencePool whose pods are
	// served: Selector and Namespaces do not apply (see the package doc).
	Pool PoolRef
}

// PoolRef names an InferencePool (inference.networking.k8s.io/v1).
type PoolRef struct {
	Name, Namespace string
}

// String is namespace/name.
func (r PoolRef) String() string { return r.Namespace + "/" + r.Name }

// DefaultConfig returns the defaults: every namespace, the pods labeled
// kvrouter.io/pool=default, vLLM's serving port, event ports left to the
// subscriber.
func DefaultConfig() Config {
	return Config{
		Kubeconfig:  InCluster,
		Selector:    "kvrouter.io/pool=default",
		ServingPort: 8000,
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Kubeconfig == "" {
		errs = append(errs, errors.New("no kubeconfig (want a path or \"in-cluster\")"))
	}
	if _, err := labels.Parse(c.Selector); err != nil {
		errs = append(errs, fmt.Errorf("selector: %q: %w", c.Selector, err))
	}
	for _, p := range []struct {
		what string
		port int
	}{{"serving port", c.ServingPort}, {"event port", c.EventPort}, {"replay port", c.ReplayPort}} {
		if p.port < 0 || p.port > 65535 || (p.port == 0 && p.what == "serving port") {
			errs = append(errs, fmt.Errorf("%s %d is not in [1, 65535]", p.what, p.port))
		}
	}
	seen := map[string]bool{}
	for _, ns := range c.Namespaces {
		if ns == "" || seen[ns] {
			errs = append(errs, fmt.Errorf("namespaces: namespace %q is empty or repeated", ns))
		}
		seen[ns] = true
	}
	if c.Pool.Name != "" {
		if c.Pool.Namespace == "" {
			errs = append(errs, fmt.Errorf("pool %q has no namespace", c.Pool.Name))
		}
		if len(c.Namespaces) > 0 {
			errs = append(errs, errors.New("namespaces: set with a pool, whose namespace is the one watched"))
		}
	}
	if c.Resync < 0 {
		errs = append(errs, fmt.Errorf("negative resync %s", c.Resync))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	return nil
}
