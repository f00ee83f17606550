package discovery

import (
	"context"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	giev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
)

// ObjectiveResource is the Gateway API Inference Extension's
// InferenceObjective resource.
var ObjectiveResource = schema.GroupVersionResource{Group: giev1alpha2.GroupVersion.Group, Version: giev1alpha2.GroupVersion.Version, Resource: "inferenceobjectives"}

// objectives follows the InferenceObjectives of the pool's namespace that
// name the pool: their priorities by name.
type objectives struct {
	sync.Mutex
	byKey    map[string]objective // namespace/name → objective
	onChange func(map[string]int)
}

type objective struct {
	name     string
	priority int
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

// runObjectives watches the pool namespace's InferenceObjectives until ctx
// is done. Their CRD missing or unreadable leaves every objective at
// priority 0: logged once, not a reason to stop serving.
func (d *Discovery) runObjectives(ctx context.Context) {
	inf := dynamicinformer.NewFilteredDynamicInformer(d.dyn, ObjectiveResource, d.cfg.Pool.Namespace, d.cfg.Resync, cache.Indexers{}, nil)
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    d.onObjective,
		UpdateFunc: func(_, obj any) { d.onObjective(obj) },
		DeleteFunc: d.onObjectiveDelete,
	})
	if err != nil {
		d.log.Warn("InferenceObjectives not followed: every objective has priority 0", "err", err)
		return
	}
	warned := false
	_ = inf.Informer().SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if !warned {
			warned = true
			d.log.Warn("InferenceObjectives cannot be read: every objective has priority 0", "namespace", d.cfg.Pool.Namespace, "err", err)
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	inf.Informer().RunWithContext(ctx)
}

func (d *Discovery) onObjective(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var o giev1alpha2.InferenceObjective
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
		d.log.Warn("InferenceObjective cannot be read", "name", u.GetName(), "err", err)
		return
	}
	key := o.Namespace + "/" + o.Name
	if string(o.Spec.PoolRef.Name) != d.cfg.Pool.Name {
		d.setObjective(key, nil) // names another pool (or stopped naming this one)
		return
	}
	p := 0
	if o.Spec.Priority != nil {
		p = *o.Spec.Priority
	}
	d.setObjective(key, &objective{name: o.Name, priority: p})
}

func (d *Discovery) onObjectiveDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		d.setObjective(u.GetNamespace()+"/"+u.GetName(), nil)
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
	for _, o := range d.objectives.byKey {
		prios[o.name] = o.priority
	}
	d.objectives.onChange(maps.Clone(prios))
}
