package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// staticPod is one --pod flag: a vLLM pod known without Kubernetes.
type staticPod struct {
	name, ip       string
	port           int
	model          string
	events, replay int // 0: the defaults
	dp             int // data-parallel ranks behind the one port; 0: 1
	role           pod.Role
}

// parseStaticPod reads name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R].
func parseStaticPod(s string) (staticPod, error) {
	var p staticPod
	parts := strings.Split(s, ",")
	name, addr, ok := strings.Cut(parts[0], "=")
	if !ok || name == "" {
		return p, fmt.Errorf("pod %q: want name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R]", s)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		return p, fmt.Errorf("pod %q: address %q is not ip:port", s, addr)
	}
	p.name, p.ip = name, host
	if p.port, err = parsePort(port); err != nil {
		return p, fmt.Errorf("pod %q: %w", s, err)
	}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "model":
			p.model = v
		case "events":
			p.events, err = parsePort(v)
		case "replay":
			p.replay, err = parsePort(v)
		case "role":
			p.role, err = pod.ParseRole(v)
		case "dp":
			if p.dp, err = strconv.Atoi(v); err != nil || p.dp < 1 || p.dp > pod.MaxDPSize {
				err = fmt.Errorf("dp %q is not in [1, %d]", v, pod.MaxDPSize)
			}
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return p, fmt.Errorf("pod %q: %w", s, err)
		}
	}
	return p, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("port %q is not in [1, 65535]", s)
	}
	return n, nil
}

func (p staticPod) address() string { return net.JoinHostPort(p.ip, strconv.Itoa(p.port)) }
