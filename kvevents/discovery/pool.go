package discovery

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kube"
	"github.com/kvrouter/kvrouter/internal/pod"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// PoolResource is the resource of the InferencePools discovery watches.
var PoolResource = schema.GroupVersionResource{Group: giev1.GroupName, Version: "v1", Resource: "inferencepools"}

// poolSpec is what discovery serves of the pool: nil while it is missing.
type poolSpec struct {
	selector labels.Selector
	ports    []int
}

func (s *poolSpec) equal(o *poolSpec) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.selector.String() == o.selector.String() && slices.Equal(s.ports, o.ports)
}

// poolState is the pool mode's state, behind its own lock, taken before
// Discovery.mu.
type poolState struct {
	sync.Mutex
	spec     *poolSpec
	reported *string             // the last problem given to onPool
	names    map[string][]string // candidates of each Kubernetes pod, by namespace/name
	pods     cache.Store         // the pool namespace's pods
	onPool   func(problem string)
}

// OnPool sets the function told, in pool mode, when the pool goes missing
// (problem says why) and when it is there again (problem is ""). It is
// called once the informers synced, then on every change, one call at a
// time; it must not block. Call it before Run.
func (d *Discovery) OnPool(f func(problem string)) {
	d.pool.Lock()
	defer d.pool.Unlock()
	d.pool.onPool = f
}

// specOf reads a pool's selector and target ports.
func specOf(p *giev1.InferencePool) *poolSpec {
	set := labels.Set{}
	for k, v := range p.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	s := &poolSpec{selector: labels.SelectorFromSet(set)}
	for _, port := range p.Spec.TargetPorts {
		s.ports = append(s.ports, int(port.Number))
	}
	return s
}

// runPool watches the pool and the pods of its namespace until ctx is done.
// The pods are filtered here, not by the API server, so that a selector
// edit applies at once to the pods already listed.
func (d *Discovery) runPool(ctx context.Context) error {
	ref := d.cfg.Pool
	var wg sync.WaitGroup
	defer wg.Wait()
	podInf := coreinformers.NewPodInformer(d.client, ref.Namespace, d.cfg.Resync, cache.Indexers{})
	d.pool.Lock()
	d.pool.pods = podInf.GetStore()
	d.pool.names = make(map[string][]string)
	d.pool.Unlock()
	podReg, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    d.onPoolPod,
		UpdateFunc: func(_, obj any) { d.onPoolPod(obj) },
		DeleteFunc: d.onPoolPodDelete,
	})
	if err != nil {
		return fmt.Errorf("discovery: pods of pool %s: %w", ref, err)
	}
	if err := podInf.SetWatchErrorHandlerWithContext(d.watchError); err != nil {
		return fmt.Errorf("discovery: pods of pool %s: %w", ref, err)
	}
	poolInf := dynamicinformer.NewFilteredDynamicInformer(d.dyn, PoolResource, ref.Namespace, d.cfg.Resync, cache.Indexers{},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
		})
	poolReg, err := poolInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    d.onPoolObject,
		UpdateFunc: func(_, obj any) { d.onPoolObject(obj) },
		DeleteFunc: func(any) { d.setPool(nil, fmt.Sprintf("InferencePool %s was deleted: no pod is served", ref)) },
	})
	if err != nil {
		return fmt.Errorf("discovery: pool %s: %w", ref, err)
	}
	// A pool that cannot be listed (no CRD, no RBAC) is a problem to
	// report, not only a retry to log: the informer would never sync.
	if err := poolInf.Informer().SetWatchErrorHandlerWithContext(d.poolWatchError); err != nil {
		return fmt.Errorf("discovery: pool %s: %w", ref, err)
	}
	wg.Go(func() { podInf.RunWithContext(ctx) })
	wg.Go(func() { poolInf.Informer().RunWithContext(ctx) })
	wg.Go(func() { d.runObjectives(ctx) })
	wg.Go(func() { d.probeUntilSynced(ctx, ref.Namespace) })
	if cache.WaitForCacheSync(ctx.Done(), podReg.HasSynced, poolReg.HasSynced) {
		d.pool.Lock()
		if d.pool.spec == nil {
			d.reportLocked(fmt.Sprintf("InferencePool %s not found: no pod is served", ref))
		}
		d.pool.Unlock()
		d.log.Info("pool informers synced", "pool", ref.String(), "pods", d.known())
		d.metrics.synced.Set(1)
		close(d.synced)
	}
	<-ctx.Done()
	return nil
}

// poolWatchError reports a pool that cannot be read, for lack of its CRD
// or of permission, and leaves other errors to client-go.
func (d *Discovery) poolWatchError(ctx context.Context, r *cache.Reflector, err error) {
	if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		d.watchError(ctx, r, err)
		return
	}
	why := fmt.Sprintf("InferencePool %s cannot be read: %v", d.cfg.Pool, err)
	d.pool.Lock()
	defer d.pool.Unlock()
	d.metrics.pool.Set(0)
	if d.pool.reported == nil || *d.pool.reported != why {
		d.log.Warn("InferencePool cannot be read", "pool", d.cfg.Pool.String(), "err", err)
	}
	d.reportLocked(why)
}

func (d *Discovery) onPoolObject(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var p giev1.InferencePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		d.setPool(nil, fmt.Sprintf("InferencePool %s cannot be read: %v", d.cfg.Pool, err))
		return
	}
	d.setPool(specOf(&p), "")
}

// setPool applies the pool's spec (nil: it is missing, for why) to every
// pod of its namespace.
func (d *Discovery) setPool(spec *poolSpec, why string) {
	d.pool.Lock()
	defer d.pool.Unlock()
	if spec == nil {
		d.log.Warn("InferencePool missing", "pool", d.cfg.Pool.String(), "why", why)
		d.metrics.pool.Set(0)
	} else {
		d.metrics.pool.Set(1)
	}
	if !d.pool.spec.equal(spec) {
		if spec != nil {
			d.log.Info("InferencePool applied", "pool", d.cfg.Pool.String(), "selector", spec.selector.String(), "target_ports", spec.ports)
		}
		d.pool.spec = spec
		seen := map[string]bool{}
		for _, obj := range d.pool.pods.List() {
			if k, ok := obj.(*corev1.Pod); ok {
				key := k.Namespace + "/" + k.Name
				seen[key] = true
				d.setCandidatesLocked(key, d.candidates(k))
			}
		}
		for key := range d.pool.names {
			if !seen[key] {
				d.setCandidatesLocked(key, nil)
			}
		}
	}
	// Report only once the first list is in: Run reports a pool missing
	// from it.
	if spec != nil || isClosed(d.synced) {
		d.reportLocked(why)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// reportLocked tells onPool of a change of problem.
func (d *Discovery) reportLocked(why string) {
	if d.pool.reported != nil && *d.pool.reported == why {
		return
	}
	d.pool.reported = &why
	if d.pool.onPool != nil {
		d.pool.onPool(why)
	}
}

func (d *Discovery) onPoolPod(obj any) {
	k, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	d.pool.Lock()
	defer d.pool.Unlock()
	d.setCandidatesLocked(k.Namespace+"/"+k.Name, d.candidates(k))
}

func (d *Discovery) onPoolPodDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if k, ok := obj.(*corev1.Pod); ok {
		d.pool.Lock()
		defer d.pool.Unlock()
		d.setCandidatesLocked(k.Namespace+"/"+k.Name, nil)
	}
}

// candidates are the routing candidates of a pod under the current pool:
// none outside it, else one per target port, port k being DP rank k with
// the event ports + k (vLLM's numbering). With one target port the pod's
// kvrouter.io/dp-size annotation still applies (DP ranks behind one API
// server).
func (d *Discovery) candidates(k *corev1.Pod) []pod.Pod {
	spec := d.pool.spec
	if spec == nil || !spec.selector.Matches(labels.Set(k.Labels)) {
		return nil
	}
	name := k.Namespace + "/" + k.Name
	p, ok, problems := podFrom(k, d.cfg)
	if len(spec.ports) > 1 && p.DPSize > 0 {
		problems = append(problems, fmt.Errorf("annotation %s ignored: the pool's %d target ports are the DP ranks", AnnotationDPSize, len(spec.ports)))
	}
	if _, set := k.Annotations[AnnotationPort]; set && len(spec.ports) > 0 {
		problems = append(problems, fmt.Errorf("annotation %s ignored: the pool's target ports apply", AnnotationPort))
	}
	for _, err := range problems {
		d.metrics.ignored.Inc()
		d.log.Warn("pod metadata ignored", "pod", name, "err", err)
	}
	if !ok {
		return nil
	}
	if len(spec.ports) == 0 {
		return []pod.Pod{p}
	}
	out := make([]pod.Pod, 0, len(spec.ports))
	for r, port := range spec.ports {
		c := p
		c.Name, c.Port = pod.RankName(name, r), port
		if len(spec.ports) > 1 {
			c.DPSize = 0
			c.EventPort, c.ReplayPort = shift(p.EventPort, vllmEventPort, r), shift(p.ReplayPort, vllmReplayPort, r)
		}
		if c.EventPort+max(c.DPSize, 1) > 65536 || c.ReplayPort+max(c.DPSize, 1) > 65536 {
			d.metrics.ignored.Inc()
			d.log.Warn("pod rank skipped: its event ports are out of range", "pod", c.Name)
			continue
		}
		out = append(out, c)
	}
	return out
}

// vLLM's default event and replay ports, which the ranks of a pool's
// pod are numbered from when it names none.
const vllmEventPort, vllmReplayPort = 5557, 5558

// shift is port p of rank r: each rank is its own API server, followed on
// the ports + r, numbered from vLLM's default port def when p is 0. Rank
// 0's port 0 stays 0, for the subscriber to find as any pod's.
func shift(p, def, r int) int {
	switch {
	case r == 0:
		return p
	case p == 0:
		p = def
	}
	return p + r
}

// setCandidatesLocked replaces the candidates of the Kubernetes pod key.
func (d *Discovery) setCandidatesLocked(key string, next []pod.Pod) {
	keep := make(map[string]bool, len(next))
	for _, p := range next {
		keep[p.Name] = true
	}
	for _, name := range d.pool.names[key] {
		if !keep[name] {
			d.update(name, nil)
		}
	}
	for i := range next {
		d.update(next[i].Name, &next[i])
	}
	if len(next) == 0 {
		delete(d.pool.names, key)
		return
	}
	names := make([]string, len(next))
	for i, p := range next {
		names[i] = p.Name
	}
	d.pool.names[key] = names
}

// newDynamic is the dynamic client of pool mode.
func newDynamic(kubeconfig string) (dynamic.Interface, error) {
	rc, err := kube.NewConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	c, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery: dynamic client: %w", err)
	}
	return c, nil
}
