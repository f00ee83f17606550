package discovery

import (
	"context"
	"maps"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	giev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
)

// ObjectiveResources are the InferenceObjective resources kvrouter follows,
// the first winning when both name an objective: llm-d's
// (llm-d.ai/v1alpha2, where InferenceObjective moved after GIE v1.5.0) and
// the Gateway API Inference Extension's (inference.networking.x-k8s.io/
// v1alpha2, its API module's). Both have spec.priority and spec.poolRef.
var ObjectiveResources = []schema.GroupVersionResource{
	{Group: "llm-d.ai", Version: "v1alpha2", Resource: "inferenceobjectives"},
	{Group: giev1alpha2.GroupVersion.Group, Version: giev1alpha2.GroupVersion.Version, Resource: "inferenceobjectives"},
}

// objectives follows the InferenceObjectives of the pool's namespace that
// name the pool: their priorities by name.
type objectives struct {
	sync.Mutex
	byKey    map[string]objective // rank/namespace/name → objective
	onChange func(map[string]int)
}

type objective struct {
	name     string
	priority int
	rank     int // the resource's index in ObjectiveResources
}

// OnObjectives sets the function told, in pool mode, the priorities of the
// InferenceObjectives naming the pool, by objective name, whenever they
// change (an objective without a priority has 0). One call at a time; it
// must not block. Call it before Run.
func (d *Discovery) OnObjectives(f func(map[string]int)) {
	d.objectives.Lock()
	defer d.objectives.Unlock()
	d.objectives.onChange = f
}

// runObjectives watches the pool namespace's InferenceObjectives of every
// ObjectiveResources until ctx is done. A resource the cluster does not
// serve is logged once (INFO when its CRD is missing, as one of the two
// usually is; WARN otherwise, such as no permission) and leaves its
// objectives out; with neither, every objective has priority 0.
func (d *Discovery) runObjectives(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for rank, res := range ObjectiveResources {
		inf := dynamicinformer.NewFilteredDynamicInformer(d.dyn, res, d.cfg.Pool.Namespace, d.cfg.Resync, cache.Indexers{}, nil)
		_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { d.onObjective(rank, obj) },
			UpdateFunc: func(_, obj any) { d.onObjective(rank, obj) },
			DeleteFunc: func(obj any) { d.onObjectiveDelete(rank, obj) },
		})
		if err != nil {
			d.log.Warn("InferenceObjectives not followed", "resource", res.String(), "err", err)
			continue
		}
		var warned sync.Once
		_ = inf.Informer().SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			warned.Do(func() {
				if apierrors.IsNotFound(err) {
					d.log.Info("InferenceObjectives of this group are not served by the cluster", "resource", res.String())
					return
				}
				d.log.Warn("InferenceObjectives cannot be read: those of this group have priority 0", "resource", res.String(), "namespace", d.cfg.Pool.Namespace, "err", err)
			})
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
		wg.Go(func() { inf.Informer().RunWithContext(ctx) })
	}
}

// onObjective reads obj, an InferenceObjective of ObjectiveResources[rank].
func (d *Discovery) onObjective(rank int, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	key := objectiveKey(rank, u.GetNamespace(), u.GetName())
	pool, _, err := unstructured.NestedString(u.Object, "spec", "poolRef", "name")
	if err != nil {
		d.log.Warn("InferenceObjective cannot be read", "name", u.GetName(), "err", err)
		return
	}
	if pool != d.cfg.Pool.Name {
		d.setObjective(key, nil) // names another pool (or stopped naming this one)
		return
	}
	p, _, err := unstructured.NestedInt64(u.Object, "spec", "priority")
	if err != nil {
		d.log.Warn("InferenceObjective cannot be read", "name", u.GetName(), "err", err)
		return
	}
	d.setObjective(key, &objective{name: u.GetName(), priority: int(p), rank: rank})
}

func objectiveKey(rank int, namespace, name string) string {
	return strconv.Itoa(rank) + "/" + namespace + "/" + name
}

func (d *Discovery) onObjectiveDelete(rank int, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		d.setObjective(objectiveKey(rank, u.GetNamespace(), u.GetName()), nil)
	}
}

// setObjective records one objective (nil: gone) and tells the new
// priorities when they changed.
func (d *Discovery) setObjective(key string, o *objective) {
	d.objectives.Lock()
	defer d.objectives.Unlock()
	old, had := d.objectives.byKey[key]
	switch {
	case o == nil && !had, o != nil && had && old == *o:
		return
	case o == nil:
		delete(d.objectives.byKey, key)
	default:
		if d.objectives.byKey == nil {
			d.objectives.byKey = map[string]objective{}
		}
		d.objectives.byKey[key] = *o
	}
	if d.objectives.onChange == nil {
		return
	}
	prios := make(map[string]int, len(d.objectives.byKey))
	ranks := make(map[string]int, len(d.objectives.byKey))
	for _, o := range d.objectives.byKey {
		if r, seen := ranks[o.name]; !seen || o.rank < r {
			prios[o.name], ranks[o.name] = o.priority, o.rank
		}
	}
	d.objectives.onChange(maps.Clone(prios))
}
