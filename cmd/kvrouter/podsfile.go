package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
)

// podEntry is one vLLM pod known without Kubernetes: an item of the config
// file's pods.static and of the pods file's pods.
type podEntry struct {
	Name       string   `yaml:"name"`        // unique
	Address    string   `yaml:"address"`     // ip:port of its OpenAI server (and /metrics)
	Model      string   `yaml:"model"`       // served base model; default pods.default_model
	Aliases    []string `yaml:"aliases"`     // other names it serves the model under
	LoRAs      []string `yaml:"loras"`       // LoRA adapters it serves
	EventPort  int      `yaml:"event_port"`  // KV events PUB port; 0: 5557
	ReplayPort int      `yaml:"replay_port"` // KV events replay port; 0: 5558
	DPSize     int      `yaml:"dp_size"`     // data-parallel size; 0: 1
	Role       string   `yaml:"role"`        // prefill, decode or both (default)
}

// podsDoc is the pods file.
type podsDoc struct {
	Pods []podEntry `yaml:"pods"`
}

// pod checks e and returns it as a ready pod.
func (e podEntry) pod(defaultModel string) (pod.Pod, []string) {
	var errs []string
	p := pod.Pod{
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
	if p.Role, err = pod.ParseRole(e.Role); err != nil {
		errs = append(errs, err.Error())
	}
	return p, errs
}

// parsePods decodes a pods file strictly and checks its pods, and that none
// takes a static pod's name. It returns the file's pods and its problems.
func parsePods(path string, data []byte, static []pod.Pod, defaultModel string) ([]pod.Pod, []string) {
	var doc podsDoc
	list, positions := decodeYAML(path, data, &doc)
	p := &problems{list: list}
	pods := podsFrom("pods", doc.Pods, defaultModel, p)
	for i := len(list); i < len(p.list); i++ {
		if where := locateIn(path, positions, p.list[i]); where != p.list[i] {
			p.list[i] = where
		} else {
			p.list[i] = path + ": " + p.list[i]
		}
	}
	for _, q := range pods {
		if slices.ContainsFunc(static, func(s pod.Pod) bool { return s.Name == q.Name }) {
			p.add("%s: pod %q is also a static pod", path, q.Name)
		}
	}
	return pods, p.list
}

// readPodsFile reads and checks a pods file: its pods and its problems.
func readPodsFile(path string, static []pod.Pod, defaultModel string) ([]pod.Pod, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []string{err.Error()}
	}
	return parsePods(path, data, static, defaultModel)
}

// podsFileParser is the pods file's discovery.ParseFunc: parsePods, its
// problems joined in one error.
func podsFileParser(path string, static []pod.Pod, defaultModel string) discovery.ParseFunc {
	return func(data []byte) ([]pod.Pod, error) {
		pods, list := parsePods(path, data, static, defaultModel)
		if len(list) > 0 {
			return nil, errors.New(strings.Join(list, "; "))
		}
		return pods, nil
	}
}
