package discovery

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// TestPoolCandidates checks how a pool's target ports become candidates:
// one port keeps the pod's own DP annotation; several are DP ranks, each
// its own candidate on the event ports + rank, the dp-size and port
// annotations ignored and counted; a pod outside the selector or without
// an IP is none.
func TestPoolCandidates(t *testing.T) {
	d, err := newDiscovery(testConfig(), fake.NewClientset(), &recorder{}, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	withDP := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations = map[string]string{AnnotationDPSize: "4", AnnotationPort: "7000", AnnotationEventPort: "6000", AnnotationReplayPort: "6100"}
		return p
	}
	base := pod.Pod{Name: "llm/a", IP: "10.0.0.1", Model: "Qwen/Qwen3-0.6B", Ready: true}
	with := func(name string, port, ev, rep, dp int) pod.Pod {
		p := base
		p.Name, p.Port, p.EventPort, p.ReplayPort, p.DPSize = name, port, ev, rep, dp
		return p
	}
	tests := []struct {
		name    string
		pool    giev1.InferencePoolSpec
		pod     *corev1.Pod
		want    []pod.Pod
		ignored float64
	}{
		{
			name: "one port: the pod, its DP annotation kept, the port annotation not",
			pool: spec(map[string]string{"kvrouter.io/pool": "default"}, 8000),
			pod:  withDP(kpod("a", "10.0.0.1")),
			want: []pod.Pod{with("llm/a", 8000, 6000, 6100, 4)}, ignored: 1,
		},
		{
			name: "three ports: three ranks",
			pool: spec(map[string]string{"kvrouter.io/pool": "default"}, 8000, 8001, 8002),
			pod:  kpod("a", "10.0.0.1"),
			want: []pod.Pod{with("llm/a", 8000, 0, 0, 0), with("llm/a:rank-1", 8001, 5558, 5559, 0), with("llm/a:rank-2", 8002, 5559, 5560, 0)},
		},
		{
			name: "two ports and a DP annotation: the ports win, both annotations counted",
			pool: spec(map[string]string{"kvrouter.io/pool": "default"}, 8000, 9000),
			pod:  withDP(kpod("a", "10.0.0.1")),
			want: []pod.Pod{with("llm/a", 8000, 6000, 6100, 0), with("llm/a:rank-1", 9000, 6001, 6101, 0)}, ignored: 2,
		},
		{
			name: "a rank whose event port would pass 65535 is skipped",
			pool: spec(map[string]string{"kvrouter.io/pool": "default"}, 8000, 8001),
			pod: func() *corev1.Pod {
				p := kpod("a", "10.0.0.1")
				p.Annotations = map[string]string{AnnotationEventPort: "65535", AnnotationReplayPort: "5558"}
				return p
			}(),
			want: []pod.Pod{with("llm/a", 8000, 65535, 5558, 0)}, ignored: 1,
		},
		{
			name: "outside the selector",
			pool: spec(map[string]string{"app": "other"}, 8000),
			pod:  kpod("a", "10.0.0.1"),
		},
		{
			name: "no IP yet",
			pool: spec(map[string]string{"kvrouter.io/pool": "default"}, 8000),
			pod:  kpod("a", ""),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(d.metrics.ignored)
			d.pool.spec = specOf(&giev1.InferencePool{Spec: tt.pool})
			got := d.candidates(tt.pod)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("candidates = %+v\nwant %+v", got, tt.want)
			}
			for _, p := range got {
				if err := p.Validate(); err != nil {
					t.Errorf("candidate %s: %v", p.Name, err)
				}
			}
			if n := testutil.ToFloat64(d.metrics.ignored) - before; n != tt.ignored {
				t.Errorf("ignored annotations counted %v, want %v", n, tt.ignored)
			}
		})
	}
}

func spec(sel map[string]string, ports ...int32) giev1.InferencePoolSpec {
	s := giev1.InferencePoolSpec{Selector: giev1.LabelSelector{MatchLabels: map[giev1.LabelKey]giev1.LabelValue{}}}
	for k, v := range sel {
		s.Selector.MatchLabels[giev1.LabelKey(k)] = giev1.LabelValue(v)
	}
	for _, p := range ports {
		s.TargetPorts = append(s.TargetPorts, giev1.Port{Number: giev1.PortNumber(p)})
	}
	return s
}

// TestRankName checks pod.RankName: rank 0 is the pod's name, and no other
// rank's name is a name a pod can have.
func TestRankName(t *testing.T) {
	if got := pod.RankName("llm/a", 0); got != "llm/a" {
		t.Errorf("pod.RankName(llm/a, 0) = %q, want llm/a", got)
	}
	got := pod.RankName("llm/a", 3)
	if got != "llm/a:rank-3" {
		t.Errorf("pod.RankName(llm/a, 3) = %q, want llm/a:rank-3", got)
	}
	if _, name, _ := strings.Cut(got, "/"); len(validation.IsDNS1123Subdomain(name)) == 0 {
		t.Errorf("rank name %q is also a valid pod name", got)
	}
}
