package discovery

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/pod"

	corev1 "k8s.io/api/core/v1"
)

// The annotations (and the one label) discovery reads; see the package doc.
const (
	AnnotationModel       = "kvrouter.io/model"
	AnnotationServedNames = "kvrouter.io/served-model-names"
	AnnotationLoRAs       = "kvrouter.io/lora-adapters"
	AnnotationPort        = "kvrouter.io/port"
	AnnotationEventPort   = "kvrouter.io/events-port"
	AnnotationReplayPort  = "kvrouter.io/replay-port"
	AnnotationDPSize      = "kvrouter.io/dp-size"
	AnnotationRole        = "kvrouter.io/role"
	AnnotationEngine      = "kvrouter.io/engine"
	LabelModel            = "kvrouter.io/model"
	// LabelRole is llm-d's label for a pod's prefill/decode role (prefill,
	// decode, both), read when the pod has no kvrouter.io/role annotation.
	LabelRole = "llm-d.ai/role"
	// ServingPortName is the container port name read when the pod has no
	// kvrouter.io/port annotation.
	ServingPortName = "http"
)

// podFrom reads a Kubernetes pod. ok is false when the pod is not to be
// routed to at all: no IP yet, finished, or no model. problems lists
// annotations that were ignored.
func podFrom(k *corev1.Pod, cfg Config) (p pod.Pod, ok bool, problems []error) {
	if k.Status.PodIP == "" || k.Status.Phase == corev1.PodSucceeded || k.Status.Phase == corev1.PodFailed {
		return pod.Pod{}, false, nil
	}
	a := k.Annotations
	p = pod.Pod{
		Name:    k.Namespace + "/" + k.Name,
		IP:      k.Status.PodIP,
		Model:   firstOf(a[AnnotationModel], k.Labels[LabelModel], cfg.DefaultModel),
		Aliases: splitList(a[AnnotationServedNames]),
		LoRAs:   splitList(a[AnnotationLoRAs]),
		Ready:   k.DeletionTimestamp == nil && podReady(k),
	}
	if p.Model == "" {
		return pod.Pod{}, false, []error{fmt.Errorf("no %s annotation or label and no default model", AnnotationModel)}
	}
	number := func(key string, def, hi int) int {
		v, set := a[key]
		if !set {
			return def
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > hi {
			problems = append(problems, fmt.Errorf("annotation %s=%q is not an integer in [1, %d]", key, v, hi))
			return def
		}
		return n
	}
	p.Port = number(AnnotationPort, namedPort(k, cfg.ServingPort), 65535)
	p.EventPort = number(AnnotationEventPort, cfg.EventPort, 65535)
	p.ReplayPort = number(AnnotationReplayPort, cfg.ReplayPort, 65535)
	p.DPSize = number(AnnotationDPSize, 0, 1024)
	if v := firstOf(a[AnnotationRole], k.Labels[LabelRole]); v != "" {
		role, err := pod.ParseRole(strings.TrimSpace(v))
		if err != nil {
			problems = append(problems, fmt.Errorf("%s or label %s: %w", AnnotationRole, LabelRole, err))
		}
		p.Role = role
	}
	if v, set := a[AnnotationEngine]; set {
		engine, err := pod.ParseEngine(strings.TrimSpace(v))
		if err != nil {
			problems = append(problems, fmt.Errorf("annotation %s: %w", AnnotationEngine, err))
		}
		p.Engine = engine
	}
	return p, true, problems
}

func podReady(k *corev1.Pod) bool {
	for _, c := range k.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// namedPort is the container port named ServingPortName, else def.
func namedPort(k *corev1.Pod, def int) int {
	for _, c := range k.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == ServingPortName && p.ContainerPort > 0 {
				return int(p.ContainerPort)
			}
		}
	}
	return def
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// splitList reads a comma-separated annotation, dropping empty items.
func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
