package test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/router"
)

// TestE2EKVCacheGroups: a pod of an MLA model (DeepSeek, Kimi: one
// mla_attention group) and a pod of a model with full-attention and
// sliding-window layers (gpt-oss, Gemma: the window's group frees every
// block that leaves its 32 tokens as soon as it is stored) each prefill a
// prompt. /v1/score's report then finds every full block of the prompt
// cached on each, and /debug/pods' groups say which the index holds.
func TestE2EKVCacheGroups(t *testing.T) {
	models := [][]vllmsim.Group{
		{{Kind: "mla_attention"}},
		{{Kind: "full_attention"}, {Kind: "sliding_window", SlidingWindow: 32}},
	}
	f := startFleetWith(t, fleetOptions{pods: len(models), sim: func(i int, c *vllmsim.Config) { c.Groups = models[i] }})
	system := strings.Repeat("You are a careful assistant who answers in full sentences. ", 12)
	for i := range models {
		pod := fmt.Sprintf("sim-%d", i)
		body := fmt.Sprintf(`{"model":"qwen3","prompt":%q,"max_tokens":1}`, fmt.Sprintf("Pod %d. ", i)+system)
		resp, err := http.Post("http://"+f.pods[pod]+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s answered %s", pod, resp.Status)
		}
		var rep *router.Report
		var got router.Score
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) { // real sockets: poll with a bound
			if rep, err = f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
			if j := slices.IndexFunc(rep.Pods, func(s router.Score) bool { return s.Pod == pod }); j >= 0 {
				got = rep.Pods[j]
			}
			if got.Tiers.GPU == len(rep.Blocks) || time.Now().After(deadline) {
				break
			}
		}
		if len(rep.Blocks) < 8 || got.Tiers.GPU != len(rep.Blocks) {
			t.Errorf("%s (groups %+v): /v1/score matched %d of the prompt's %d blocks, want all", pod, models[i], got.Tiers.GPU, len(rep.Blocks))
		}
	}
	want := map[string][]kvevents.Group{
		"sim-0": {{Index: 0, Kind: "mla_attention", Indexed: true}},
		"sim-1": {{Index: 0, Kind: "full_attention", Indexed: true}, {Index: 1, Kind: "sliding_window", SlidingWindow: 32}},
	}
	for _, st := range f.events.Status() {
		if !slices.Equal(st.Groups, want[st.Name]) {
			t.Errorf("%s's groups = %+v, want %+v", st.Name, st.Groups, want[st.Name])
		}
	}
	if got := metric(t, f.reg, "group_skipped_events_total", "sim-1", "kind", "sliding_window"); got < 2 {
		t.Errorf("sim-1's skipped sliding-window events = %v, want its store and its removal at least", got)
	}
}
