package test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/router"
)

// TestE2ERandomRootRekeyed: pods started without PYTHONHASHSEED seed their
// hash chains with random bytes, so none of the hashes they publish is one
// kvrouter computes. Once their chains are found to mismatch (the default
// verification: 8 failed root chains), kvrouter rekeys their blocks from
// the events' token ids, and the second request of a conversation goes to
// the pod that served the first, by prefix, with its cached blocks.
func TestE2ERandomRootRekeyed(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 2, sim: func(_ int, c *vllmsim.Config) { c.RandomRoot = true }})
	rekeyed := func() bool {
		st := f.events.Status()
		for _, s := range st {
			if !s.Rekeyed || s.Verification != kvevents.VerifyMismatch {
				return false
			}
		}
		return len(st) == 2
	}
	// Distinct prompts, each a root chain that fails verification, spread
	// over both pods at random (no prefix, equal load).
	deadline := time.Now().Add(30 * time.Second) // real sockets: poll with a bound
	for i := 0; !rekeyed(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d prompts the pods are %+v, want both rekeyed", i, f.events.Status())
		}
		if i < 200 {
			f.send(t, fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, fmt.Sprintf("Prompt %d. ", i)+strings.Repeat("Tell me about caches. ", 4)))
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	stored := map[string]float64{}
	for name := range f.pods {
		stored[name] = metric(t, f.reg, "events_total", name, "type", "block_stored")
	}
	system := strings.Repeat("You are a careful assistant who answers in full sentences. ", 12)
	first := f.send(t, fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, system+"What is a KV cache?"))
	pod := first.UpstreamHeaders["x-kvrouter-pod"]
	// The pod's BlockStored event, rekeyed, is all the follow-up can match:
	// the first decision's speculative entries are dropped.
	f.awaitMetric(t, "events_total", pod, stored[pod]+1, "type", "block_stored")
	f.dropSpeculation()
	follow := fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, system+"And why does routing matter?")
	// The event is counted when it arrives and applied just after: wait
	// until the index holds its rekeyed blocks for real.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) { // real sockets: poll with a bound
		rep, err := f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(follow)})
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(rep.Pods, func(s router.Score) bool { return s.Pod == pod }); i >= 0 && rep.Pods[i].Tiers.GPU > 0 || time.Now().After(deadline) {
			break
		}
	}
	second := f.send(t, follow)
	if got := second.UpstreamHeaders["x-kvrouter-pod"]; got != pod || second.UpstreamHeaders["x-kvrouter-reason"] != "prefix" {
		t.Fatalf("follow-up went to %s (%s, %s), want %s by prefix", got, second.UpstreamHeaders["x-kvrouter-reason"], second.UpstreamHeaders["x-kvrouter-cached-blocks"], pod)
	}
	if got := second.UpstreamHeaders["x-kvrouter-cached-blocks"]; strings.HasPrefix(got, "0/") {
		t.Fatalf("follow-up cached blocks = %s, want the shared prefix", got)
	}
}
