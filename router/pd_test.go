package router

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/pod"
)

// TestRoutePrefillDecode: with prefill and decode pods, the destination is
// always a decode pod, chosen by its cache and load; a prefill pod computes
// the prompt only when the destination lacks PDThreshold of its tokens,
// chosen by the cost of what it lacks (its own cache counted), and holds
// the prefill work until the prompt is computed. A model served by prefill
// pods alone is routed among them as a whole.
func TestRoutePrefillDecode(t *testing.T) {
	tr := newTestRouter(t)
	tr.cfg.PDThresholdTokens, tr.cfg.DestinationEndpoints = 8, 4
	for _, p := range []pod.Pod{
		{Name: "p1", IP: "10.0.1.1", Port: 8000, Model: "pd", Role: pod.RolePrefill, Ready: true},
		{Name: "p2", IP: "10.0.1.2", Port: 8000, Model: "pd", Role: pod.RolePrefill, Ready: true},
		{Name: "d1", IP: "10.0.2.1", Port: 8000, Model: "pd", Role: pod.RoleDecode, Ready: true},
		{Name: "d2", IP: "10.0.2.2", Port: 8000, Model: "pd", Role: pod.RoleDecode, Ready: true},
		{Name: "q1", IP: "10.0.3.1", Port: 8000, Model: "ponly", Role: pod.RolePrefill, Ready: true},
		{Name: "q2", IP: "10.0.3.2", Port: 8000, Model: "ponly", Role: pod.RolePrefill, Ready: true},
	} {
		tr.fleet.Upsert(p)
	}
	route := func(model, prompt string) *Decision {
		t.Helper()
		d, err := tr.route("/v1/completions", completion(model, prompt, ""))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// Nothing cached: 30 uncached tokens ≥ 8, a prefill hop.
	d := route("pd", prompt)
	name, value, ok := d.PrefillHeader()
	if !slices.Contains([]string{"d1", "d2"}, d.Pod) || !slices.Contains([]string{"p1", "p2"}, d.PrefillPod) || !ok ||
		name != "x-prefiller-host-port" || value != d.PrefillAddress {
		t.Fatalf("cold prompt: to %s, prefill %s (%s: %s %v); want a decode pod and a prefill pod", d.Pod, d.PrefillPod, name, value, ok)
	}
	if slices.ContainsFunc(d.Fallbacks, func(e string) bool { return e == "10.0.1.1:8000" || e == "10.0.1.2:8000" }) {
		t.Errorf("fallbacks %v include a prefill pod", d.Fallbacks)
	}
	pl, dl := tr.fleet.Load(d.PrefillPod), tr.fleet.Load(d.Pod)
	if pl.Prefilling.Load() != 1 || pl.PrefillTokens.Load() == 0 || pl.InFlight.Load() != 1 || dl.Prefilling.Load() != 0 || dl.PrefillTokens.Load() != 0 || dl.InFlight.Load() != 1 {
		t.Errorf("while prefilling: prefill pod %d/%d/%d, decode pod %d/%d/%d (prefilling/tokens/in flight); want the prefill work on the prefill pod",
			pl.Prefilling.Load(), pl.PrefillTokens.Load(), pl.InFlight.Load(), dl.Prefilling.Load(), dl.PrefillTokens.Load(), dl.InFlight.Load())
	}
	if s := tr.scoreOn(completion("pd", prompt, ""), d.PrefillPod, "after the hop"); s.Spec == 0 {
		t.Errorf("the prefill pod %s has no speculative blocks of the prompt it computes", d.PrefillPod)
	}
	d.Done()
	if pl.Prefilling.Load() != 0 || pl.PrefillTokens.Load() != 0 || pl.InFlight.Load() != 0 || dl.InFlight.Load() != 0 {
		t.Errorf("after Done: prefill pod %d/%d/%d, decode pod in flight %d; want nothing left", pl.Prefilling.Load(), pl.PrefillTokens.Load(), pl.InFlight.Load(), dl.InFlight.Load())
	}

	// Cached on d2 but 2 tokens: below the threshold, no hop. (Another
	// prompt than the first: its decode pod still holds speculative
	// entries of that one.)
	cached := "the prompt cached on d2, thirty"
	tr.store("d2", cached, "", "")
	if d := route("pd", cached); d.Pod != "d2" || d.PrefillPod != "" {
		t.Errorf("prompt cached on d2: to %s, prefill %q; want d2 alone", d.Pod, d.PrefillPod)
	} else {
		d.Done()
	}

	// Cached on p2 only: a decode destination, p2 computes the rest.
	other := "a different prompt of some thirty bytes"
	tr.store("p2", other, "", "")
	if d := route("pd", other); d.Pod[0] != 'd' || d.PrefillPod != "p2" {
		t.Errorf("prompt cached on p2: to %s, prefill %q; want a decode pod, prefill p2", d.Pod, d.PrefillPod)
	} else {
		d.Done()
	}

	// Prefill pods alone: routed among them, no hop.
	if d := route("ponly", prompt); d.Pod[0] != 'q' || d.PrefillPod != "" {
		t.Errorf("prefill pods alone: to %s, prefill %q; want q1 or q2 alone", d.Pod, d.PrefillPod)
	} else {
		d.Done()
	}
}
