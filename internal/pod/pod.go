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
	// DPSize is the data-parallel size; 0 means 1. A pod of more than one
	// rank is routed to rank by rank: Ranks expands it.
	DPSize int
	// DPRank is the data-parallel rank this candidate stands for when
	// DPRanks > 0: it is one rank of a server running DPRanks ranks behind
	// one API port, and requests sent to it carry X-data-parallel-rank:
	// DPRank so that the server's own balancer does not pick another.
	DPRank, DPRanks int
	// Role is the pod's part in prefill/decode disaggregation: RolePrefill
	// pods compute prompts for decode pods, RoleDecode pods take requests
	// whose prompt a prefill pod computed; RoleBoth ("") serves whole
	// requests, and may be a decode destination too.
	Role Role
	// Engine is the inference engine serving it: EngineVLLM, EngineSGLang
	// or EngineTRTLLM; "" is the configured default (pods.default_engine).
	Engine string
	// Ready is true while the pod may be routed to.
	Ready bool
}

// The engines kvrouter follows.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTRTLLM = "trtllm"
)

// ParseEngine reads an engine name: vllm, sglang, trtllm, or "" (the
// default).
func ParseEngine(s string) (string, error) {
	switch s {
	case "", EngineVLLM, EngineSGLang, EngineTRTLLM:
		return s, nil
	}
	return "", fmt.Errorf("engine %q, want vllm, sglang or trtllm", s)
}

// Role is a pod's part in prefill/decode disaggregation, as llm-d names
// them.
type Role string

// The roles.
const (
	RoleBoth    Role = ""
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// ParseRole reads a role: prefill, decode, or both ("" too).
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case string(RolePrefill), string(RoleDecode):
		return Role(s), nil
	}
	return "", fmt.Errorf("role %q, want prefill, decode or both", s)
}

// Endpoint returns ip:port of the pod's OpenAI server.
func (p Pod) Endpoint() string { return net.JoinHostPort(p.IP, strconv.Itoa(p.Port)) }

// Equal reports whether p and q are the same in every field.
func (p Pod) Equal(q Pod) bool {
	return p.Name == q.Name && p.IP == q.IP && p.Port == q.Port && p.Model == q.Model &&
		slices.Equal(p.Aliases, q.Aliases) && slices.Equal(p.LoRAs, q.LoRAs) &&
		p.EventPort == q.EventPort && p.ReplayPort == q.ReplayPort && p.DPSize == q.DPSize &&
		p.DPRank == q.DPRank && p.DPRanks == q.DPRanks && p.Role == q.Role && p.Engine == q.Engine && p.Ready == q.Ready
}

// RankName is the name of data-parallel rank k of the pod named name:
// rank 0 keeps the pod's name, rank k ≥ 1 is name:rank-k. ':' never occurs
// in a Kubernetes name, so no pod's name is another's rank.
func RankName(name string, k int) string {
	if k == 0 {
		return name
	}
	return name + ":rank-" + strconv.Itoa(k)
}

// Ranks returns the routing candidates of p: p itself when it runs one
// data-parallel rank, else one candidate per rank (DPSize ranks behind one
// API port, vLLM's --data-parallel-size), named by RankName, each with its
// own KV-event ports (vLLM's numbering: rank k publishes on the event and
// replay ports + k; a port of 0 stays 0, for the subscriber to find: it
// asks the pod, or takes its default + k), DPSize 0 and DPRank k of
// DPRanks. Each rank then has its own index entries, speculation and load,
// and requests to it name its rank.
func Ranks(p Pod) []Pod {
	if p.DPSize <= 1 {
		return []Pod{p}
	}
	out := make([]Pod, p.DPSize)
	for k := range out {
		c := p
		c.Name = RankName(p.Name, k)
		c.EventPort, c.ReplayPort = plus(p.EventPort, k), plus(p.ReplayPort, k)
		c.DPSize, c.DPRank, c.DPRanks = 0, k, p.DPSize
		out[k] = c
	}
	return out
}

// plus is port + k, or 0 when port is 0.
func plus(port, k int) int {
	if port == 0 {
		return 0
	}
	return port + k
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
	if p.DPRanks < 0 || p.DPRanks > MaxDPSize || p.DPRank < 0 || p.DPRanks > 0 && p.DPRank >= p.DPRanks || p.DPRanks == 0 && p.DPRank != 0 {
		errs = append(errs, fmt.Errorf("DP rank %d of %d, want a rank below the count", p.DPRank, p.DPRanks))
	}
	if _, err := ParseRole(string(p.Role)); err != nil || p.Role == "both" {
		errs = append(errs, fmt.Errorf("role %q, want prefill, decode or none", p.Role))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pod %q: %w", p.Name, err)
	}
	return nil
}
