package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Consumer is told about the pods discovery finds. Its methods must not
// block.
type Consumer interface {
	// Upsert adds a pod or replaces what is known of it.
	Upsert(pod.Pod)
	// Remove forgets the named pod (namespace/name).
	Remove(name string)
}

// Discovery watches the selected pods and drives a Consumer.
type Discovery struct {
	cfg      Config
	client   kubernetes.Interface
	dyn      dynamic.Interface // pool mode only
	selector labels.Selector
	consumer Consumer
	log      *slog.Logger
	metrics  *metrics
	synced   chan struct{} // closed once every informer synced
	// listErr is the last error of a pod or pool list or watch, and
	// listWarned when it was last logged at WARN (watchError).
	listErr    atomic.Pointer[string]
	listWarned atomic.Int64
	pool       poolState
	// objectives are the pool's InferenceObjectives (pool mode).
	objectives objectives

	mu struct {
		sync.Mutex
		known map[string]pod.Pod // what the consumer was told, by name
	}
}

// New returns a Discovery that talks to the API server cfg.Kubeconfig
// names and registers its metrics on reg (nil registers none). It starts
// nothing: call Run.
func New(cfg Config, consumer Consumer, reg prometheus.Registerer, log *slog.Logger) (*Discovery, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := newClient(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	d, err := newDiscovery(cfg, client, consumer, reg, log)
	if err != nil {
		return nil, err
	}
	if cfg.Pool.Name != "" {
		if d.dyn, err = newDynamic(cfg.Kubeconfig); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func newDiscovery(cfg Config, client kubernetes.Interface, consumer Consumer, reg prometheus.Registerer, log *slog.Logger) (*Discovery, error) {
	sel, err := labels.Parse(cfg.Selector)
	if err != nil {
		return nil, fmt.Errorf("discovery: selector %q: %w", cfg.Selector, err)
	}
	met, err := newMetrics(reg, cfg.Pool.Name != "")
	if err != nil {
		return nil, err
	}
	d := &Discovery{cfg: cfg, client: client, selector: sel, consumer: consumer, log: log, metrics: met, synced: make(chan struct{})}
	d.mu.known = make(map[string]pod.Pod)
	return d, nil
}

// Synced is closed once every informer has listed its pods and the
// consumer has been told about them.
func (d *Discovery) Synced() <-chan struct{} { return d.synced }

// ListError is the last error listing or watching the pods (or the pool)
// from the API server, "" when none: what keeps a discovery that never
// synced from it.
func (d *Discovery) ListError() string {
	if e := d.listErr.Load(); e != nil {
		return *e
	}
	return ""
}

// watchError records a failed list or watch for ListError and logs it,
// then leaves it to client-go's own handling.
func (d *Discovery) watchError(ctx context.Context, r *cache.Reflector, err error) {
	d.listFailed(err)
	cache.DefaultWatchErrorHandler(ctx, r, err)
}

// listFailed records err for ListError and logs it: a WARN at most once a
// minute (the informers retry with backoff).
func (d *Discovery) listFailed(err error) {
	msg := err.Error()
	d.listErr.Store(&msg)
	now := time.Now().UnixNano()
	if last := d.listWarned.Load(); now-last >= int64(time.Minute) && d.listWarned.CompareAndSwap(last, now) {
		d.log.Warn("discovery: the Kubernetes API server cannot be read; not ready until it can, retrying", "error", err)
	}
}

// probeUntilSynced asks the API server for one pod of namespace every
// probeEvery until the informers synced, and records the error for
// ListError (client-go's streaming lists back off without reporting it).
func (d *Discovery) probeUntilSynced(ctx context.Context, namespace string) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.synced:
			d.listErr.Store(nil)
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, probeEvery)
		_, err := d.client.CoreV1().Pods(namespace).List(pctx, metav1.ListOptions{Limit: 1})
		cancel()
		if err != nil && ctx.Err() == nil {
			d.listFailed(err)
		}
	}
}

// probeEvery is how often probeUntilSynced asks.
const probeEvery = 2 * time.Second

// Run watches the pods until ctx is done and returns once the informers
// have stopped.
func (d *Discovery) Run(ctx context.Context) error {
	if d.cfg.Pool.Name != "" {
		return d.runPool(ctx)
	}
	namespaces := d.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	synced := make([]cache.InformerSynced, 0, len(namespaces))
	for _, ns := range namespaces {
		inf := coreinformers.NewFilteredPodInformer(d.client, ns, d.cfg.Resync, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = d.cfg.Selector })
		reg, err := inf.AddEventHandler(d.handler())
		if err != nil {
			return fmt.Errorf("discovery: namespace %q: %w", ns, err)
		}
		synced = append(synced, reg.HasSynced)
		if err := inf.SetWatchErrorHandlerWithContext(d.watchError); err != nil {
			return fmt.Errorf("discovery: namespace %q: %w", ns, err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Go(func() { d.probeUntilSynced(ctx, namespaces[0]) })
	if cache.WaitForCacheSync(ctx.Done(), synced...) {
		d.log.Info("pod informers synced", "namespaces", len(namespaces), "pods", d.known())
		d.metrics.synced.Set(1)
		close(d.synced)
	}
	<-ctx.Done()
	return nil
}

func (d *Discovery) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    d.onAdd,
		UpdateFunc: func(_, obj any) { d.onAdd(obj) },
		DeleteFunc: d.onDelete,
	}
}

// onAdd handles an added or updated pod.
func (d *Discovery) onAdd(obj any) {
	k, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	name := k.Namespace + "/" + k.Name
	if !d.selector.Matches(labels.Set(k.Labels)) {
		d.update(name, nil)
		return
	}
	p, ok, problems := podFrom(k, d.cfg)
	for _, err := range problems {
		d.metrics.ignored.Inc()
		d.log.Warn("pod metadata ignored", "pod", name, "err", err)
	}
	if !ok {
		d.update(name, nil)
		return
	}
	d.update(name, &p)
}

func (d *Discovery) onDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if k, ok := obj.(*corev1.Pod); ok {
		d.update(k.Namespace+"/"+k.Name, nil)
	}
}

// update tells the consumer what changed for one pod: next nil means it is
// gone. Holding the lock keeps the consumer's calls in order.
func (d *Discovery) update(name string, next *pod.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.countLocked()
	prev, had := d.mu.known[name]
	switch {
	case next == nil:
		if had {
			delete(d.mu.known, name)
			d.log.Info("pod removed", "pod", name)
			d.consumer.Remove(name)
		}
		return
	case had && prev.Equal(*next):
		return
	case had && prev.IP != next.IP:
		d.log.Info("pod address changed", "pod", name, "old_ip", prev.IP, "ip", next.IP)
		d.consumer.Remove(name)
	}
	d.mu.known[name] = *next
	d.log.Info("pod updated", "pod", name, "ip", next.IP, "model", next.Model, "ready", next.Ready)
	d.consumer.Upsert(*next)
}

func (d *Discovery) known() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.known)
}
