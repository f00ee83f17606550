// Package pod defines Pod, one vLLM server as every part of kvrouter knows
// it: the pod sources (Kubernetes, --pod flags, the pods file) produce Pods,
// the fleet routes to them and the event subscribers follow their KV events.
package pod

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// MaxDPSize bounds a pod's data-parallel size.
const MaxDPSize = 1024

// Pod is one vLLM server.
type Pod struct {
	// Name is unique among the pods: namespace/name in Kubernetes.
	Name string
	// IP is the pod's address; never empty.
	IP string
	// Port is the port of its OpenAI server, which also serves /metrics.
	Port int
	// Model is the base model it serves: the index namespace of its blocks.
	Model string
	// Aliases are other names it serves the base model under.
	Aliases []string
	// LoRAs are the LoRA adapters it serves.
	LoRAs []string
	// EventPort and ReplayPort are the KV-event PUB and replay ROUTER ports
	// of DP rank 0 (rank k uses the port + k); 0 means the subscriber's
	// default.
	EventPort, ReplayPort int
	// DPSize is the data-parallel size; 0 means 1.
	DPSize int
	// Ready is true while the pod may be routed to.
	Ready bool
}

// Endpoint returns ip:port of the pod's OpenAI server.
func (p Pod) Endpoint() string { return net.JoinHostPort(p.IP, strconv.Itoa(p.Port)) }

// Equal reports whether p and q are the same in every field.
func (p Pod) Equal(q Pod) bool {
	return p.Name == q.Name && p.IP == q.IP && p.Port == q.Port && p.Model == q.Model &&
		slices.Equal(p.Aliases, q.Aliases) && slices.Equal(p.LoRAs, q.LoRAs) &&
		p.EventPort == q.EventPort && p.ReplayPort == q.ReplayPort && p.DPSize == q.DPSize && p.Ready == q.Ready
}

// Validate reports every problem of p at once.
func (p Pod) Validate() error {
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("empty name"))
	}
	if net.ParseIP(p.IP) == nil {
		errs = append(errs, fmt.Errorf("IP %q is not an IP address", p.IP))
	}
	if p.Port < 0 || p.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d out of range", p.Port))
	}
	ranks := max(p.DPSize, 1)
	if p.EventPort < 0 || p.ReplayPort < 0 || p.EventPort+ranks > 65536 || p.ReplayPort+ranks > 65536 {
		errs = append(errs, fmt.Errorf("ports %d/%d out of range for DP size %d", p.EventPort, p.ReplayPort, p.DPSize))
	}
	if p.DPSize < 0 || p.DPSize > MaxDPSize {
		errs = append(errs, fmt.Errorf("DP size %d, want in [0, %d]", p.DPSize, MaxDPSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pod %q: %w", p.Name, err)
	}
	return nil
}
