package router

import "strconv"

// The response and upstream-request headers that carry a routing decision,
// for access logs: every front end (ext_proc, the HTTP proxy) writes these.
const (
	HeaderPod          = "x-kvrouter-pod"           // the chosen pod's name
	HeaderCachedBlocks = "x-kvrouter-cached-blocks" // cached/total prompt blocks on it
	HeaderReason       = "x-kvrouter-reason"        // why it was chosen (a Reason)
)

// Headers returns d's routing headers as name, value pairs, names in lower
// case.
func (d *Decision) Headers() [3][2]string {
	return [3][2]string{
		{HeaderPod, d.Pod},
		{HeaderCachedBlocks, strconv.Itoa(d.Matched) + "/" + strconv.Itoa(d.Total)},
		{HeaderReason, string(d.Reason)},
	}
}
