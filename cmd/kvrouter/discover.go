package main

import (
	"log/slog"

	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/kvrouter/kvrouter/router/fleet"
)

// kubeconfigOff as --kubeconfig turns discovery off.
const kubeconfigOff = "off"

// resolveKubeconfig applies --kubeconfig's default: in-cluster when the
// process runs in a Kubernetes pod (serviceHost is KUBERNETES_SERVICE_HOST),
// else off. It returns "" for off.
func resolveKubeconfig(flag, serviceHost string) string {
	switch {
	case flag == kubeconfigOff:
		return ""
	case flag != "":
		return flag
	case serviceHost != "":
		return discovery.InCluster
	}
	return ""
}

// fleetSink is the Consumer of both pod sources, discovery's informer and
// its static pods: it keeps the router's fleet and the event manager in
// step with the pods. A pod is routed to only while ready; its events are
// followed from its first ready moment until it goes away.
type fleetSink struct {
	fleet  *fleet.Fleet
	events *kvevents.Manager
	log    *slog.Logger
}

func (s fleetSink) Upsert(p pod.Pod) {
	s.fleet.Upsert(p)
	if !p.Ready {
		return
	}
	if err := s.events.Ensure(p); err != nil {
		s.log.Warn("pod events not followed", "pod", p.Name, "err", err)
	}
}

func (s fleetSink) Remove(name string) {
	s.fleet.Remove(name)
	s.events.Remove(name)
}
