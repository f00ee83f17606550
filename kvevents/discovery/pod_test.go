package discovery

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/pod"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kpod is a selected, ready vLLM pod; edit it per test.
func kpod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "llm",
			Labels: map[string]string{"kvrouter.io/pool": "default"},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.DefaultModel = "Qwen/Qwen3-0.6B"
	return cfg
}

func TestPodFrom(t *testing.T) {
	deleting := metav1.Now()
	tests := []struct {
		name     string
		edit     func(*corev1.Pod)
		want     pod.Pod
		ok       bool
		problems int
	}{
		{
			name: "defaults",
			edit: func(*corev1.Pod) {},
			want: pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B", Ready: true},
			ok:   true,
		},
		{
			name: "annotations",
			edit: func(k *corev1.Pod) {
				k.Annotations = map[string]string{
					AnnotationModel: "meta-llama/Llama-3.1-8B", AnnotationServedNames: "llama, llama8b",
					AnnotationLoRAs: "sql-lora,,chat-lora ", AnnotationPort: "8080",
					AnnotationEventPort: "6000", AnnotationReplayPort: "6001", AnnotationDPSize: "2",
				}
			},
			want: pod.Pod{
				Name: "llm/a", IP: "10.0.0.1", Port: 8080, Model: "meta-llama/Llama-3.1-8B",
				Aliases: []string{"llama", "llama8b"}, LoRAs: []string{"sql-lora", "chat-lora"},
				EventPort: 6000, ReplayPort: 6001, DPSize: 2, Ready: true,
			},
			ok: true,
		},
		{
			name: "model label and named container port",
			edit: func(k *corev1.Pod) {
				k.Labels[LabelModel] = "gpt2"
				k.Spec.Containers = []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "zmq", ContainerPort: 5557}, {Name: "http", ContainerPort: 9000}}}}
			},
			want: pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 9000, Model: "gpt2", Ready: true},
			ok:   true,
		},
		{
			name: "bad annotations fall back",
			edit: func(k *corev1.Pod) {
				k.Annotations = map[string]string{AnnotationEventPort: "x", AnnotationDPSize: "0", AnnotationPort: "70000"}
			},
			want:     pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B", Ready: true},
			ok:       true,
			problems: 3,
		},
		{
			name: "llm-d's role label",
			edit: func(k *corev1.Pod) { k.Labels[LabelRole] = "prefill" },
			want: pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B", Role: pod.RolePrefill, Ready: true},
			ok:   true,
		},
		{
			name: "role annotation over the label; both is no role",
			edit: func(k *corev1.Pod) {
				k.Labels[LabelRole] = "prefill"
				k.Annotations = map[string]string{AnnotationRole: "both"}
			},
			want: pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B", Ready: true},
			ok:   true,
		},
		{
			name:     "bad role",
			edit:     func(k *corev1.Pod) { k.Annotations = map[string]string{AnnotationRole: "encode"} },
			want:     pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B", Ready: true},
			ok:       true,
			problems: 1,
		},
		{
			name: "not ready",
			edit: func(k *corev1.Pod) { k.Status.Conditions[0].Status = corev1.ConditionFalse },
			want: pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B"},
			ok:   true,
		},
		{
			name: "being deleted",
			edit: func(k *corev1.Pod) { k.DeletionTimestamp = &deleting },
			want: pod.Pod{Name: "llm/a", IP: "10.0.0.1", Port: 8000, Model: "Qwen/Qwen3-0.6B"},
			ok:   true,
		},
		{name: "no IP", edit: func(k *corev1.Pod) { k.Status.PodIP = "" }},
		{name: "finished", edit: func(k *corev1.Pod) { k.Status.Phase = corev1.PodSucceeded }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := kpod("a", "10.0.0.1")
			tt.edit(k)
			got, ok, problems := podFrom(k, testConfig())
			if ok != tt.ok || !got.Equal(tt.want) || len(problems) != tt.problems {
				t.Errorf("podFrom() = %+v, %v, %v; want %+v, %v, %d problems", got, ok, problems, tt.want, tt.ok, tt.problems)
			}
		})
	}
}

func TestPodFromNoModel(t *testing.T) {
	_, ok, problems := podFrom(kpod("a", "10.0.0.1"), DefaultConfig())
	if ok || len(problems) != 1 {
		t.Errorf("podFrom(no model, no default) = %v, %v; want false and one problem", ok, problems)
	}
}

func TestSplitList(t *testing.T) {
	if got := splitList(" a, ,b,"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("splitList = %q, want [a b]", got)
	}
}
