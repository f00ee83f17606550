package redisindex

import "github.com/kvrouter/kvrouter/kvindex"

// SetGroups gives pod's KV-cache groups to the local view, which prices a
// hybrid pod's matches by the prefix every group serves: a match reads the
// full-attention blocks from Redis and the other groups' from the local
// view, which every replica keeps from every pod's events. Without the
// local view (Config.NoLocalView) the other groups are nowhere to be read,
// and hybrid pods are priced by their full-attention blocks alone.
func (x *Index) SetGroups(pod kvindex.PodID, blockSize int, groups []kvindex.Group) error {
	if x.cfg.NoLocalView {
		if groups != nil && x.noViewWarned.CompareAndSwap(false, true) {
			x.log.Warn("redisindex: a pod has KV-cache groups besides full attention, and without the local view they cannot be priced: its matches count its full-attention blocks alone")
		}
		return nil
	}
	return x.local.SetGroups(pod, blockSize, groups)
}
