package main

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// fleetSink is the Consumer of both pod sources, discovery's informer and
// its static pods: it keeps the router's fleet and the event manager in
// step with the pods. A pod is routed to only while ready; its events are
// followed from its first ready moment until it goes away. A pod of several
// data-parallel ranks behind one API port enters both as one candidate per
// rank (pod.Ranks), each followed on its own event ports.
type fleetSink struct {
	fleet  *fleet.Fleet
	events *kvevents.Manager
	log    *slog.Logger

	mu    sync.Mutex
	ranks map[string][]string // a pod's name → its candidates' names
}

// newFleetSink returns the sink of fleet and events.
func newFleetSink(f *fleet.Fleet, events *kvevents.Manager, log *slog.Logger) *fleetSink {
	return &fleetSink{fleet: f, events: events, log: log, ranks: map[string][]string{}}
}

func (s *fleetSink) Upsert(p pod.Pod) {
	cands := pod.Ranks(p)
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	s.mu.Lock()
	gone := s.ranks[p.Name]
	s.ranks[p.Name] = names
	s.mu.Unlock()
	for _, name := range gone {
		if !slices.Contains(names, name) { // fewer ranks than before
			s.drop(name)
		}
	}
	for _, c := range cands {
		s.fleet.Upsert(c)
		if !c.Ready {
			continue
		}
		if err := s.events.Ensure(c); err != nil {
			s.log.Warn("pod events not followed", "pod", c.Name, "err", err)
		}
	}
}

func (s *fleetSink) Remove(name string) {
	s.mu.Lock()
	names, ok := s.ranks[name]
	delete(s.ranks, name)
	s.mu.Unlock()
	if !ok {
		names = []string{name}
	}
	for _, n := range names {
		s.drop(n)
	}
}

// drop removes one candidate from the fleet and the event manager.
func (s *fleetSink) drop(name string) {
	s.fleet.Remove(name)
	s.events.Remove(name)
}
