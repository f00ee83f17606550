package test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
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
// cached on each (the window's group holds the last two blocks, all a hit
// at the prompt's end needs), and /debug/pods' groups say how the index
// holds them.
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
		"sim-0": {{Index: 0, Kind: "mla_attention", BlockSize: 16, Indexed: true}},
		"sim-1": {{Index: 0, Kind: "full_attention", BlockSize: 16, Indexed: true}, {Index: 1, Kind: "sliding_window", SlidingWindow: 32, BlockSize: 16, Indexed: true}},
	}
	for _, st := range f.events.Status() {
		if !slices.Equal(st.Groups, want[st.Name]) {
			t.Errorf("%s's groups = %+v, want %+v", st.Name, st.Groups, want[st.Name])
		}
	}
	if got := metric(t, f.reg, "group_skipped_events_total", "sim-1", "kind", "sliding_window"); got != 0 {
		t.Errorf("sim-1's skipped sliding-window events = %v, want none", got)
	}
}

// TestE2EHybridPriced: two pods of a hybrid model, full attention beside a
// 32-token sliding window (a hit needs the two blocks before its end), or
// beside Mamba layers (a hit needs a state saved at its end; the pods save
// one at each prompt's last block). sim-0 prefilled a long document, sim-1
// its first 60 words. A question on the document's first 140 words finds
// 140 words of full-attention blocks on sim-0, but sim-0's other group
// kept only the document's end: vLLM would reuse nothing there. sim-1 can
// reuse its 60 words. The report says so, and the question goes to sim-1.
func TestE2EHybridPriced(t *testing.T) {
	for name, other := range map[string]vllmsim.Group{
		"window": {Kind: "sliding_window", SlidingWindow: 32},
		"mamba":  {Kind: "mamba"},
	} {
		t.Run(name, func(t *testing.T) { hybridPriced(t, []vllmsim.Group{{Kind: "full_attention"}, other}) })
	}
}

func hybridPriced(t *testing.T, groups []vllmsim.Group) {
	f := startFleetWith(t, fleetOptions{pods: 2, sim: func(_ int, c *vllmsim.Config) { c.Groups = groups }})
	words := make([]string, 200)
	for i := range words {
		words[i] = fmt.Sprintf("clause%d", i)
	}
	text := func(n int) string { return strings.Join(words[:n], " ") }
	body := func(prompt string) string { return fmt.Sprintf(`{"model":"qwen3","prompt":%q,"max_tokens":1}`, prompt) }
	f.post(t, "sim-0", body(text(200)))
	f.post(t, "sim-1", body(text(60)))
	short, err := f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(body(text(60)))})
	if err != nil {
		t.Fatal(err)
	}
	question := body(text(140) + " Which clause comes first?")
	var rep *router.Report
	scores := map[string]router.Score{}
	if !poll(func() bool {
		if rep, err = f.router.Score(router.Request{Path: "/v1/completions", Body: []byte(question)}); err != nil {
			t.Fatal(err)
		}
		for _, s := range rep.Pods {
			scores[s.Pod] = s
		}
		return scores["sim-1"].Matched == len(short.Blocks)
	}) {
		t.Fatalf("sim-1 matched %d blocks, want its %d", scores["sim-1"].Matched, len(short.Blocks))
	}
	if scores["sim-0"].Matched != 0 {
		t.Errorf("sim-0 matched %d blocks, want none: its %s group holds only the document's end", scores["sim-0"].Matched, groups[1].Kind)
	}
	// Its full-attention group does hold the question's first blocks, more
	// than sim-1 can reuse: priced by full attention alone, sim-0 would win.
	hashes := make([]uint64, len(rep.Blocks))
	for i, b := range rep.Blocks {
		if hashes[i], err = strconv.ParseUint(b, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := f.index.Pod("sim-0")
	held := 0
	for held < len(hashes) && f.index.Holds(id, hashes[held]) {
		held++
	}
	if held <= len(short.Blocks) {
		t.Fatalf("sim-0's full-attention group holds %d of the question's blocks, want more than %d", held, len(short.Blocks))
	}
	res := f.send(t, question)
	if h := res.UpstreamHeaders; h["x-kvrouter-pod"] != "sim-1" || h["x-kvrouter-reason"] != "prefix" {
		t.Errorf("the question went to %s (%s, %s cached), want sim-1 by prefix", h["x-kvrouter-pod"], h["x-kvrouter-reason"], h["x-kvrouter-cached-blocks"])
	}
}
