package router

import (
	"slices"
	"testing"
)

// TestFallbacks: with Endpoints 3 a decision names the pick and the next two
// by cost, all of the model and inside the subset; Served moves the
// request's load and speculative entries to the fallback that served.
func TestFallbacks(t *testing.T) {
	tr := newTestRouter(t) // llama on a, b, c; qwen on d
	tr.cfg.DestinationEndpoints = 3
	tr.store("b", prompt, "", "") // b caches the prompt: the pick
	d, err := tr.route("/v1/completions", completion("llama", prompt, ""))
	if err != nil {
		t.Fatal(err)
	}
	if d.Pod != "b" || len(d.Fallbacks) != 2 || slices.Contains(d.Fallbacks, d.Address) || slices.Contains(d.Fallbacks, "10.0.0.4:8000") {
		t.Fatalf("decision = pod %s, fallbacks %v; want b then the other two llama pods", d.Pod, d.Fallbacks)
	}
	fb := d.Fallbacks[0]
	if d.Served("10.9.9.9:1") || d.Served(d.Address) {
		t.Error("Served moved the decision to an endpoint that is no fallback")
	}
	before := tr.scoreOn(completion("llama", prompt, ""), podAt(fb), "before the move").Spec
	if !d.Served(fb) {
		t.Fatalf("Served(%s) = false, want the decision moved", fb)
	}
	if d.Address != fb || d.Pod != podAt(fb) {
		t.Errorf("after Served(%s): pod %s at %s", fb, d.Pod, d.Address)
	}
	if got := tr.fleet.Load("b").InFlight.Load(); got != 0 {
		t.Errorf("b's in-flight after the move = %d, want 0", got)
	}
	if got := tr.fleet.Load(d.Pod).InFlight.Load(); got != 1 {
		t.Errorf("%s's in-flight after the move = %d, want 1", d.Pod, got)
	}
	if after := tr.scoreOn(completion("llama", prompt, ""), d.Pod, "after the move").Spec; after <= before {
		t.Errorf("%s's speculative blocks = %d after the move, %d before; want the prompt's", d.Pod, after, before)
	}
	if b, to := tr.fleet.Load("b").Spec.Speculated(), tr.fleet.Load(d.Pod).Spec.Speculated(); b != 0 || to != 7 {
		t.Errorf("ledgers after the move: b %d blocks, %s %d; want 0 and 7", b, d.Pod, to)
	}
	d.Done()
	if got := tr.fleet.Load(d.Pod).InFlight.Load(); got != 0 {
		t.Errorf("%s's in-flight after Done = %d, want 0", d.Pod, got)
	}
	if n := tr.fleet.Load(d.Pod).Spec.Speculated(); n != 0 {
		t.Errorf("%s's ledger after Done: %d blocks, want 0", d.Pod, n)
	}
	if d.Served(d.Fallbacks[1]) {
		t.Error("Served moved a decision already done")
	}

	d2, err := tr.route("/v1/completions", completion("llama", prompt, ""), "10.0.0.1:8000", "10.0.0.3:8000")
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Done()
	if len(d2.Fallbacks) != 1 || d2.Fallbacks[0] == d2.Address || !slices.Contains([]string{"10.0.0.1:8000", "10.0.0.3:8000"}, d2.Fallbacks[0]) {
		t.Errorf("with a subset of two: pick %s, fallbacks %v; want the other one only", d2.Address, d2.Fallbacks)
	}
}

// podAt names the test fleet's pod at an endpoint.
func podAt(endpoint string) string {
	return map[string]string{"10.0.0.1:8000": "a", "10.0.0.2:8000": "b", "10.0.0.3:8000": "c", "10.0.0.4:8000": "d"}[endpoint]
}
