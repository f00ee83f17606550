package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"
)

// ParseFunc turns the content of a pods file into the pods it lists,
// reporting every problem in one error. The file's format is its caller's:
// kvrouter's, YAML, is read by PodsFileParser.
type ParseFunc func(data []byte) ([]pod.Pod, error)

// Static drives a Consumer with the pods known without Kubernetes: the
// static pods, which never change, and those of a pods file, which it
// re-reads on every tick. A changed file is applied as a diff against what
// the consumer was told: gone pods are removed first, then new and changed
// ones upserted in name order; a pod whose IP changed is removed before it
// is upserted again, so what was known of it at the old address is cleared.
// A file that cannot be read, cannot be parsed or lists bad pods changes
// nothing: the last good pods stay.
type Static struct {
	static   []pod.Pod
	path     string // "" without a pods file
	parse    ParseFunc
	interval time.Duration
	consumer Consumer
	log      *slog.Logger
	metrics  *staticMetrics
	tick     <-chan time.Time // nil: a ticker of interval; tests set it

	mu struct {
		sync.Mutex
		known   map[string]pod.Pod // what the consumer was told, by name
		read    bool               // the file was read once
		sum     [sha256.Size]byte  // of the content last read
		readErr string             // the last read error, reported once
	}
}

// NewStatic returns a Static that tells consumer about the static pods and,
// when path is not "", about the pods parse finds in the file at path,
// which Run re-reads every interval. It registers the kvrouter_podsfile_*
// metrics on reg (nil registers none) and logs to log (nil: nowhere). It
// reads nothing and starts nothing: call Reload once to apply the pods,
// then Run.
func NewStatic(static []pod.Pod, path string, parse ParseFunc, interval time.Duration, consumer Consumer, reg prometheus.Registerer, log *slog.Logger) (*Static, error) {
	switch {
	case consumer == nil:
		return nil, errors.New("discovery: static pods: no consumer")
	case path != "" && parse == nil:
		return nil, fmt.Errorf("discovery: pods file %s: no parse function", path)
	case path != "" && interval <= 0:
		return nil, fmt.Errorf("discovery: pods file %s: interval %v, want > 0", path, interval)
	}
	if err := checkPods(nil, static); err != nil {
		return nil, fmt.Errorf("discovery: static pods: %w", err)
	}
	met, err := newStaticMetrics(reg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Static{
		static: slices.Clone(static), path: path, parse: parse, interval: interval,
		consumer: consumer, log: log, metrics: met,
	}
	s.mu.known = make(map[string]pod.Pod)
	return s, nil
}

// Run re-reads the pods file on every tick until ctx is done, logging what
// it could not apply; without a pods file it returns at once. It returns
// nil.
func (s *Static) Run(ctx context.Context) error {
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
			if err := s.Reload(); err != nil {
				s.log.Error("pods file not applied; keeping the last good pods", "path", s.path, "err", err)
			}
		}
	}
}

// Reload reads the pods file and, when its content changed since the last
// read, parses it and applies its pods and the static ones; without a pods
// file it applies the static pods. It returns an error only for a change it
// could not apply, once per change: a read error is reported once until a
// different one, a broken content once until the content changes. The
// error wraps, one level down, the read error, the parse function's error,
// or the problems of the parsed pods prefixed with the file's path: a pod
// that is not valid (pod.Pod.Validate), a name used twice or a static
// pod's name.
func (s *Static) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" {
		s.applyLocked(s.static)
		return nil
	}
	data, changed, err := s.readLocked()
	if err != nil || !changed {
		return err
	}
	pods, err := s.parse(data)
	if err == nil {
		if perr := checkPods(s.static, pods); perr != nil {
			err = fmt.Errorf("%s: %w", s.path, perr)
		}
	}
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("discovery: pods file: %w", err)
	}
	s.applyLocked(append(slices.Clone(s.static), pods...))
	s.metrics.reloads.WithLabelValues("ok").Inc()
	return nil
}

// readLocked reads the pods file. changed is false when the content is the
// one last read, or when the read failed as the last one did.
func (s *Static) readLocked() (data []byte, changed bool, err error) {
	data, err = os.ReadFile(s.path)
	if err != nil {
		if err.Error() == s.mu.readErr {
			return nil, false, nil
		}
		s.mu.readErr = err.Error()
		s.metrics.reloads.WithLabelValues("error").Inc()
		return nil, false, fmt.Errorf("discovery: pods file: %w", err)
	}
	s.mu.readErr = ""
	sum := sha256.Sum256(data)
	if s.mu.read && sum == s.mu.sum {
		return nil, false, nil
	}
	s.mu.read, s.mu.sum = true, sum
	return data, true, nil
}

// applyLocked drives the consumer from the known pods to next: removals
// first, then additions and changes in name order. A pod whose IP changed
// is removed first.
func (s *Static) applyLocked(next []pod.Pod) {
	byName := make(map[string]pod.Pod, len(next))
	for _, p := range next {
		byName[p.Name] = p
	}
	for _, name := range slices.Sorted(maps.Keys(s.mu.known)) {
		if _, ok := byName[name]; !ok {
			s.log.Info("static pod removed", "pod", name)
			s.consumer.Remove(name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		p := byName[name]
		prev, had := s.mu.known[name]
		switch {
		case had && prev.Equal(p):
			continue
		case had && prev.IP != p.IP:
			s.consumer.Remove(name)
		}
		s.log.Info("static pod updated", "pod", name, "ip", p.IP, "port", p.Port, "model", p.Model)
		s.consumer.Upsert(p)
	}
	s.mu.known = byName
	s.metrics.pods.Set(float64(len(byName)))
}

// checkPods reports every problem of pods at once, in one line: a pod that
// is not valid, a name used twice, or one of the static pods' names.
func checkPods(static, pods []pod.Pod) error {
	var list []string
	isStatic := make(map[string]bool, len(static))
	for _, p := range static {
		isStatic[p.Name] = true
	}
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		if err := p.Validate(); err != nil {
			list = append(list, strings.ReplaceAll(err.Error(), "\n", ", "))
		}
		switch {
		case isStatic[p.Name]:
			list = append(list, fmt.Sprintf("pod %q is also a static pod", p.Name))
		case seen[p.Name]:
			list = append(list, fmt.Sprintf("pod name %q used twice", p.Name))
		}
		seen[p.Name] = true
	}
	if len(list) == 0 {
		return nil
	}
	return errors.New(strings.Join(list, "; "))
}
