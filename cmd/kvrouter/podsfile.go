package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/prometheus/client_golang/prometheus"
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
	return p, errs
}

// parsePods decodes a pods file strictly and checks it together with the
// static pods, which it must not rename. It returns both sets of pods.
func parsePods(path string, data []byte, static []pod.Pod, defaultModel string) ([]pod.Pod, []string) {
	var doc podsDoc
	list := decodeYAML(path, data, &doc)
	p := &problems{list: list}
	pods := podsFrom(path+": pods", doc.Pods, defaultModel, p)
	for _, q := range pods {
		if slices.ContainsFunc(static, func(s pod.Pod) bool { return s.Name == q.Name }) {
			p.add("%s: pod %q is also a static pod", path, q.Name)
		}
	}
	return append(slices.Clone(static), pods...), p.list
}

// readPodsFile reads and checks a pods file: the static pods and the
// file's, and its problems.
func readPodsFile(path string, static []pod.Pod, defaultModel string) ([]pod.Pod, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []string{err.Error()}
	}
	return parsePods(path, data, static, defaultModel)
}

// podSink is what the static pods drive: the fleet and the event manager.
type podSink interface {
	Upsert(pod.Pod)
	Remove(name string)
}

// staticPods keeps the static pods and those of the pods file in the sink,
// re-reading the file on every tick and applying what changed: new pods are
// added, gone ones removed (their index entries cleared), changed ones
// updated. A file that cannot be read or is broken keeps the last good pods.
type staticPods struct {
	static       []pod.Pod
	path         string // "" without a pods file
	defaultModel string
	sink         podSink
	log          *slog.Logger
	interval     time.Duration
	tick         <-chan time.Time // nil: a ticker of interval; tests inject one
	reloads      *prometheus.CounterVec
	count        prometheus.Gauge
	mu           struct {
		sync.Mutex
		known   map[string]pod.Pod
		read    bool              // the file was read once
		sum     [sha256.Size]byte // of the content last read
		readErr string            // the last read error, reported once
	}
}

func newStaticPods(static []pod.Pod, path, defaultModel string, interval time.Duration, sink podSink, reg prometheus.Registerer, log *slog.Logger) *staticPods {
	s := &staticPods{static: static, path: path, defaultModel: defaultModel, interval: interval, sink: sink, log: log}
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvrouter_podsfile_reloads_total",
		Help: "Reads of the pods file that found a change, by result: ok (applied) or error (the last good pods kept).",
	}, []string{"result"})
	s.count = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvrouter_podsfile_pods",
		Help: "Pods known without Kubernetes: static ones and those of the pods file.",
	})
	s.mu.known = map[string]pod.Pod{}
	if reg != nil {
		reg.MustRegister(s.reloads, s.count)
	}
	return s
}

// Run re-reads the pods file on every tick until ctx is done; without a
// pods file it returns at once.
func (s *staticPods) Run(ctx context.Context) error {
	if s.path == "" {
		return nil
	}
	tick := s.tick
	if tick == nil {
		t := time.NewTicker(s.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			if err := s.reload(); err != nil {
				s.log.Error("pods file not applied; keeping the last good pods", "path", s.path, "err", err)
			}
		}
	}
}

// reload reads the pods file and applies it when its content changed. It
// returns an error only for a change it could not apply, once per change.
func (s *staticPods) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" {
		s.applyLocked(s.static)
		return nil
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		if err.Error() == s.mu.readErr {
			return nil
		}
		s.mu.readErr = err.Error()
		s.reloads.WithLabelValues("error").Inc()
		return err
	}
	s.mu.readErr = ""
	sum := sha256.Sum256(data)
	if s.mu.read && sum == s.mu.sum {
		return nil
	}
	s.mu.read, s.mu.sum = true, sum
	pods, list := parsePods(s.path, data, s.static, s.defaultModel)
	if len(list) > 0 {
		s.reloads.WithLabelValues("error").Inc()
		return errors.New(strings.Join(list, "; "))
	}
	s.applyLocked(pods)
	s.reloads.WithLabelValues("ok").Inc()
	return nil
}

// applyLocked drives the sink from the known pods to next: removals first,
// then additions and changes in name order. A pod whose IP changed is
// removed first, so its entries are cleared.
func (s *staticPods) applyLocked(next []pod.Pod) {
	byName := make(map[string]pod.Pod, len(next))
	for _, p := range next {
		byName[p.Name] = p
	}
	for _, name := range sortedKeys(s.mu.known) {
		if _, ok := byName[name]; !ok {
			s.log.Info("static pod removed", "pod", name)
			s.sink.Remove(name)
		}
	}
	for _, name := range sortedKeys(byName) {
		p := byName[name]
		prev, had := s.mu.known[name]
		switch {
		case had && samePod(prev, p):
			continue
		case had && prev.IP != p.IP:
			s.sink.Remove(name)
		}
		s.log.Info("static pod updated", "pod", name, "ip", p.IP, "port", p.Port, "model", p.Model)
		s.sink.Upsert(p)
	}
	s.mu.known = byName
	s.count.Set(float64(len(byName)))
}

func samePod(a, b pod.Pod) bool {
	return a.Name == b.Name && a.IP == b.IP && a.Port == b.Port && a.Model == b.Model &&
		slices.Equal(a.Aliases, b.Aliases) && slices.Equal(a.LoRAs, b.LoRAs) &&
		a.EventPort == b.EventPort && a.ReplayPort == b.ReplayPort && a.DPSize == b.DPSize && a.Ready == b.Ready
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
