// Package kube connects kvrouter to the Kubernetes API: one client built
// from a kubeconfig file or the pod's service account, for the parts that
// speak to the API server (pod discovery, admin authorization).
package kube

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// InCluster as a kubeconfig uses the pod's service account.
const InCluster = "in-cluster"

// NewClient connects to the API server a kubeconfig file names, or to the
// one the pod runs in for InCluster.
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := NewConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// NewConfig is the client configuration of NewClient, for the clients it
// does not build (the dynamic client of InferencePool discovery).
func NewConfig(kubeconfig string) (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	switch files := filepath.SplitList(kubeconfig); {
	case kubeconfig == InCluster:
		rc, err = rest.InClusterConfig()
	case len(files) > 1: // $KUBECONFIG's list, merged as kubectl merges it
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: files}
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	default:
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	rc.UserAgent = "kvrouter"
	return rc, nil
}

// RouteClientLogs sends client-go's own logs (klog, which is process-wide)
// to log, so they come out in the same format as kvrouter's.
func RouteClientLogs(log *slog.Logger) {
	klog.SetSlogLogger(log.With("component", "client-go"))
}
