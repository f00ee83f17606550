package pod

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Entry is one vLLM pod known without Kubernetes as kvrouter's config file
// and pods file state it (an item of pods.static, of the pods file's pods),
// and as a --pod flag does.
type Entry struct {
	Name       string   `yaml:"name"`        // unique
	Address    string   `yaml:"address"`     // ip:port of its OpenAI server (and /metrics)
	Model      string   `yaml:"model"`       // served base model; default pods.default_model
	Aliases    []string `yaml:"aliases"`     // other names it serves the model under
	LoRAs      []string `yaml:"loras"`       // LoRA adapters it serves
	EventPort  int      `yaml:"event_port"`  // KV events PUB port; 0: asked of the pod, else 5557
	ReplayPort int      `yaml:"replay_port"` // KV events replay port; 0: asked of the pod, else 5558
	DPSize     int      `yaml:"dp_size"`     // data-parallel size; 0: 1
	Role       string   `yaml:"role"`        // prefill, decode or both (default)
	Engine     string   `yaml:"engine"`      // vllm, sglang or trtllm; default pods.default_engine
}

// Pod checks e and returns it as a ready pod, and its problems.
func (e Entry) Pod(defaultModel string) (Pod, []string) {
	var errs []string
	p := Pod{
		Name: e.Name, Model: e.Model, Aliases: e.Aliases, LoRAs: e.LoRAs,
		EventPort: e.EventPort, ReplayPort: e.ReplayPort, DPSize: e.DPSize, Ready: true,
	}
	if p.Name == "" {
		errs = append(errs, "name: empty")
	}
	host, port, err := net.SplitHostPort(e.Address)
	if err != nil || net.ParseIP(host) == nil {
		errs = append(errs, fmt.Sprintf("address: %q is not ip:port", e.Address))
	} else if p.Port, err = parsePort(port); err != nil {
		errs = append(errs, "address: "+err.Error())
	}
	p.IP = host
	if p.Model == "" {
		p.Model = defaultModel
	}
	if p.Model == "" {
		errs = append(errs, "model: empty, and there is no pods.default_model (--default-model)")
	}
	if slices.Contains(e.Aliases, "") || slices.Contains(e.LoRAs, "") {
		errs = append(errs, "aliases and loras: an empty name")
	}
	for _, q := range []struct {
		key  string
		port int
	}{{"event_port", e.EventPort}, {"replay_port", e.ReplayPort}} {
		if q.port < 0 || q.port+max(e.DPSize, 1) > 65536 {
			errs = append(errs, fmt.Sprintf("%s: %d, want in [1, 65535] for every DP rank, or 0 for the default", q.key, q.port))
		}
	}
	if e.DPSize < 0 || e.DPSize > 1024 {
		errs = append(errs, fmt.Sprintf("dp_size: %d, want in [0, 1024]", e.DPSize))
	}
	if p.Role, err = ParseRole(e.Role); err != nil {
		errs = append(errs, err.Error())
	}
	if p.Engine, err = ParseEngine(e.Engine); err != nil {
		errs = append(errs, err.Error())
	}
	return p, errs
}

// FromEntries checks a list of pods (the yaml path where names) and returns
// the good ones, and the problems.
func FromEntries(where string, entries []Entry, defaultModel string) ([]Pod, []string) {
	var problems []string
	out := make([]Pod, 0, len(entries))
	seen := map[string]bool{}
	for i, e := range entries {
		pod, errs := e.Pod(defaultModel)
		for _, err := range errs {
			problems = append(problems, fmt.Sprintf("%s[%d] (%s): %s", where, i, e.Name, err))
		}
		if e.Name != "" && seen[e.Name] {
			problems = append(problems, fmt.Sprintf("%s[%d]: pod name %q used twice", where, i, e.Name))
			continue
		}
		seen[e.Name] = true
		if len(errs) == 0 {
			out = append(out, pod)
		}
	}
	return out, problems
}

// ParseFlag reads a --pod flag: name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R][,engine=E].
func ParseFlag(s string) (Entry, error) {
	var p Entry
	parts := strings.Split(s, ",")
	name, addr, ok := strings.Cut(parts[0], "=")
	if !ok || name == "" {
		return p, fmt.Errorf("pod %q: want name=ip:port[,model=M][,events=PORT][,replay=PORT][,dp=N][,role=R][,engine=E]", s)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		return p, fmt.Errorf("pod %q: address %q is not ip:port", s, addr)
	}
	if _, err = parsePort(port); err != nil {
		return p, fmt.Errorf("pod %q: %w", s, err)
	}
	p.Name, p.Address = name, net.JoinHostPort(host, port)
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "model":
			p.Model = v
		case "events":
			p.EventPort, err = parsePort(v)
		case "replay":
			p.ReplayPort, err = parsePort(v)
		case "role":
			var r Role
			r, err = ParseRole(v)
			p.Role = string(r)
		case "engine":
			p.Engine, err = ParseEngine(v)
		case "dp":
			if p.DPSize, err = strconv.Atoi(v); err != nil || p.DPSize < 1 || p.DPSize > MaxDPSize {
				err = fmt.Errorf("dp %q is not in [1, %d]", v, MaxDPSize)
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
