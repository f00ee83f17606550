package discovery

import (
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/kvrouter/kvrouter/internal/kube"
)

// newClient connects to the API server a kubeconfig file names, or to the
// one the pod runs in for InCluster.
func newClient(kubeconfig string) (kubernetes.Interface, error) {
	c, err := kube.NewClient(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	return c, nil
}

// RouteClientLogs sends client-go's own logs (klog, which is process-wide)
// to log, so they come out in the same format as kvrouter's.
func RouteClientLogs(log *slog.Logger) { kube.RouteClientLogs(log) }
