package router

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Pod is one vLLM endpoint as discovery reports it.
type Pod struct {
	Name    string   // unique, e.g. namespace/pod-name
	Address string   // ip:port of its OpenAI server
	Model   string   // the base model it serves: the index namespace
	Aliases []string // other names it serves the base model under
	LoRAs   []string // LoRA adapters it serves
	Ready   bool
}

// Fleet is the router's view of the pods: which serve which model names,
// which are ready, and how loaded each is. Reads take an immutable snapshot;
// updates (from discovery) rebuild it. Safe for concurrent use.
type Fleet struct {
	index *kvindex.Index
	mu    sync.Mutex // serializes updates
	snap  atomic.Pointer[fleetSnapshot]
}

type fleetSnapshot struct {
	pods   map[string]*member // by pod name
	models map[string]*target // by request model name
}

// member is a pod in the fleet with its index handle and live load.
type member struct {
	Pod
	id   kvindex.PodID
	load *Load
}

// target is what a request's model name resolves to.
type target struct {
	base    string // index namespace and tokenizer
	lora    string // adapter name, the hash's extra key; "" for the base model
	members []*member
}

// Load is one pod's load as the router sees it: its own in-flight requests
// and the prompt tokens they still have to prefill, and the queue the pod
// reports in its metrics.
type Load struct {
	InFlight        atomic.Int64 // requests routed here and not finished
	PrefillTokens   atomic.Int64 // prefill routed here, not yet done: uncached prompt tokens weighed by their context (Config.PrefillAttentionPerToken)
	Prefilling      atomic.Int64 // requests routed here, not yet prefilled
	Waiting         atomic.Int64 // vllm:num_requests_waiting
	Running         atomic.Int64 // vllm:num_requests_running
	KVUsagePermille atomic.Int64 // vllm:kv_cache_usage_perc × 1000
}

// NewFleet returns an empty fleet whose pods are registered in index.
func NewFleet(index *kvindex.Index) *Fleet {
	f := &Fleet{index: index}
	f.snap.Store(&fleetSnapshot{pods: map[string]*member{}, models: map[string]*target{}})
	return f
}

// Upsert adds a pod or replaces what the fleet knows of it. Its load
// survives updates that keep its address and model.
func (f *Fleet) Upsert(p Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.snap.Load()
	pods := make(map[string]*member, len(old.pods)+1)
	for n, m := range old.pods {
		pods[n] = m
	}
	m := &member{Pod: p, load: &Load{}}
	m.Aliases, m.LoRAs = slices.Clone(p.Aliases), slices.Clone(p.LoRAs)
	if prev, ok := old.pods[p.Name]; ok && prev.Address == p.Address && prev.Model == p.Model {
		m.load = prev.load
	}
	m.id = f.index.AddPod(p.Name, p.Model)
	pods[p.Name] = m
	f.snap.Store(buildSnapshot(pods))
}

// Remove drops a pod from the fleet. Its index entries are the event
// subscriber's to clear.
func (f *Fleet) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.snap.Load()
	if _, ok := old.pods[name]; !ok {
		return
	}
	pods := make(map[string]*member, len(old.pods))
	for n, m := range old.pods {
		if n != name {
			pods[n] = m
		}
	}
	f.snap.Store(buildSnapshot(pods))
}

// Load returns a pod's live load, for the metrics scraper; nil if unknown.
func (f *Fleet) Load(name string) *Load {
	if m, ok := f.snap.Load().pods[name]; ok {
		return m.load
	}
	return nil
}

// Pods returns the pods in name order.
func (f *Fleet) Pods() []Pod {
	s := f.snap.Load()
	out := make([]Pod, 0, len(s.pods))
	for _, m := range s.pods {
		out = append(out, m.Pod)
	}
	slices.SortFunc(out, func(a, b Pod) int { return compareStrings(a.Name, b.Name) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// buildSnapshot indexes pods by every model name they answer to. A name
// that is a LoRA adapter resolves to its base model with the adapter as the
// hash's extra key.
func buildSnapshot(pods map[string]*member) *fleetSnapshot {
	s := &fleetSnapshot{pods: pods, models: map[string]*target{}}
	add := func(name, base, lora string, m *member) {
		t := s.models[name]
		if t == nil {
			t = &target{base: base, lora: lora}
			s.models[name] = t
		}
		if t.base == base && t.lora == lora {
			t.members = append(t.members, m)
		}
	}
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic candidate order
	for _, n := range names {
		m := pods[n]
		add(m.Model, m.Model, "", m)
		for _, a := range m.Aliases {
			add(a, m.Model, "", m)
		}
		for _, l := range m.LoRAs {
			add(l, m.Model, l, m)
		}
	}
	return s
}
