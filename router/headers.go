package router

import (
	"strconv"

	"github.com/kvrouter/kvrouter/router/fleet"
)

// The response and upstream-request headers that carry a routing decision,
// for access logs: every front end (ext_proc, the HTTP proxy) writes these.
const (
	HeaderPod          = "x-kvrouter-pod"           // the chosen pod's name
	HeaderCachedBlocks = "x-kvrouter-cached-blocks" // cached/total prompt blocks on it
	HeaderReason       = "x-kvrouter-reason"        // why it was chosen (a Reason)
	// HeaderPrefillPod names the prefill pod of a disaggregated decision
	// (Decision.PrefillPod); absent when the chosen pod computes the
	// prompt itself.
	HeaderPrefillPod = "x-kvrouter-prefill-pod"
	// HeaderQueued is how long the request waited in the router's queue, in
	// milliseconds (Decision.Queued); absent when it did not wait.
	HeaderQueued = "x-kvrouter-queued-ms"
)

// HeaderDPRank is the request header vLLM's API server reads to send a
// request to one of its data-parallel ranks instead of the one its own
// balancer would pick (by queue length, blind to the ranks' caches). The
// front ends set it on the request to the pod whenever the decision chose
// a rank (Decision.DPRank ≥ 0), replacing any the client sent.
const HeaderDPRank = "x-data-parallel-rank"

// AppendHeaders appends d's routing headers to dst as name, value pairs,
// names in lower case: the pod, its cached blocks and the reason,
// HeaderPrefillPod when a prefill pod computes the prompt, and HeaderQueued
// when the request waited in the router's queue.
func (d *Decision) AppendHeaders(dst [][2]string) [][2]string {
	dst = append(dst,
		[2]string{HeaderPod, d.Pod},
		[2]string{HeaderCachedBlocks, strconv.Itoa(d.Matched) + "/" + strconv.Itoa(d.Total)},
		[2]string{HeaderReason, string(d.Reason)})
	if d.PrefillPod != "" {
		dst = append(dst, [2]string{HeaderPrefillPod, d.PrefillPod})
	}
	if d.Queued > 0 {
		dst = append(dst, [2]string{HeaderQueued, strconv.FormatInt(d.Queued.Milliseconds(), 10)})
	}
	return dst
}

// RankHeader returns the value of HeaderDPRank for d's pod, and false when
// the pod is not one rank of several (nothing to set).
func (d *Decision) RankHeader() (string, bool) {
	if d.DPRank < 0 {
		return "", false
	}
	return strconv.Itoa(d.DPRank), true
}

// rankOf is a member's data-parallel rank for Decision.DPRank: -1 unless it
// is one rank of a server running several.
func rankOf(m *fleet.Member) int {
	if m.Pod.DPRanks == 0 {
		return -1
	}
	return m.Pod.DPRank
}
