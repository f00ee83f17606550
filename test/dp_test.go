package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmsim"
	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/router"
)

// TestE2EDataParallelRanks: two simulated pods of 4 data-parallel ranks
// each, every rank with its own cache and event stream, and a balancer of
// their own that spreads requests without a rank header. Each turn of a
// conversation goes to the rank that holds the earlier turns: kvrouter's
// x-data-parallel-rank names it, the pod serves the request on that rank
// (its reply says which), and the rank's cache answers for the shared
// prefix. Each rank's events are followed on the ports configured, or,
// with none configured, where the pod's GET /kv_event_sources says its
// publishers bound any free port.
func TestE2EDataParallelRanks(t *testing.T) {
	t.Run("ports", func(t *testing.T) { dataParallelRanks(t, fleetOptions{pods: 2, dpSize: 4}) })
	t.Run("announced", func(t *testing.T) {
		dataParallelRanks(t, fleetOptions{pods: 2, dpSize: 4, ports: func(int, *vllmpub.Publisher) (int, int) { return 0, 0 }})
	})
}

func dataParallelRanks(t *testing.T, o fleetOptions) {
	f := startFleetWith(t, o)
	ranks := map[string]bool{}
	// The first turns are new prefixes on idle ranks, which tie: kvrouter
	// picks among the 8 at random, so four conversations all landed on one
	// rank once in 512 runs (seen in CI); six, once in 32,768.
	const conversations = 6
	for c := range conversations {
		system := fmt.Sprintf("Conversation %d. ", c) + strings.Repeat("You answer questions about distributed caches with care and precision. ", 10)
		msgs := []string{fmt.Sprintf(`{"role":"system","content":%q}`, system), `{"role":"user","content":"What is a prefix cache?"}`}
		var pod, rank string
		for turn := range 3 {
			body := fmt.Sprintf(`{"model":"qwen3","messages":[%s]}`, strings.Join(msgs, ","))
			res, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/chat/completions", Body: []byte(body)})
			if err != nil || res.Status != 200 {
				t.Fatalf("conversation %d turn %d: routing = %v, %v", c, turn, res, err)
			}
			got, hdr := res.UpstreamHeaders[router.HeaderPod], res.UpstreamHeaders[router.HeaderDPRank]
			if hdr == "" {
				t.Fatalf("conversation %d turn %d: to %s without %s", c, turn, got, router.HeaderDPRank)
			}
			served, cached := forward(t, res, "/v1/chat/completions")
			if served != hdr {
				t.Fatalf("conversation %d turn %d: %s=%s but rank %s served it", c, turn, router.HeaderDPRank, hdr, served)
			}
			if turn == 0 {
				pod, rank = got, hdr
				ranks[got] = true
			} else {
				if got != pod || hdr != rank || res.UpstreamHeaders[router.HeaderReason] != "prefix" {
					t.Fatalf("conversation %d turn %d: to %s rank %s (%s, %s), want %s rank %s by prefix", c, turn, got, hdr,
						res.UpstreamHeaders[router.HeaderReason], res.UpstreamHeaders[router.HeaderCachedBlocks], pod, rank)
				}
				if cached == 0 {
					t.Fatalf("conversation %d turn %d: rank %s of %s cached none of the prompt", c, turn, rank, pod)
				}
			}
			_, total, _ := strings.Cut(res.UpstreamHeaders[router.HeaderCachedBlocks], "/")
			blocks, err := strconv.Atoi(total)
			if err != nil {
				t.Fatalf("%s: %q", router.HeaderCachedBlocks, res.UpstreamHeaders[router.HeaderCachedBlocks])
			}
			f.awaitEvents(t, pod, blocks) // the prompt's blocks, stored by the rank's own events
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"Answer %d."}`, turn), `{"role":"user","content":"Tell me more."}`)
		}
	}
	if len(ranks) < 2 {
		t.Errorf("%d new conversations all went to %v: want the load spread over ranks", conversations, ranks)
	}
	want := "ports"
	if o.ports != nil {
		want = "kv_event_sources"
	}
	for _, st := range f.events.Status() {
		if src := st.Ranks[0].Source; src == nil || src.From != want || src.Refused != "" {
			t.Errorf("%s followed from %+v, want from %s", st.Name, src, want)
		}
	}
}

// forward sends a routed request to its pod as Envoy does, with the
// headers ext_proc set, and returns the rank that served it and the
// prompt tokens its cache held.
func forward(t *testing.T, res *envoyclient.Result, path string) (rank string, cached int) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+res.Destination+path, bytes.NewReader(res.UpstreamBody))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range res.UpstreamHeaders {
		if !strings.HasPrefix(k, ":") {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var reply struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 {
		t.Fatalf("pod %s answered %s", res.Destination, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		t.Fatal(err)
	}
	rank = resp.Header.Get(vllmsim.HeaderServedRank)
	if _, err := strconv.Atoi(rank); err != nil {
		t.Fatalf("pod %s named no serving rank: %q", res.Destination, rank)
	}
	return rank, reply.Usage.Details.Cached
}

// TestE2EPrefillDecodeHeaders: with one prefill pod and two decode pods, a
// new long prompt goes to a decode pod with the prefill pod named in
// llm-d's x-prefiller-host-port (and x-kvrouter-prefill-pod); once the
// decode pod's own events hold the prompt, its next turn, lacking fewer
// tokens than the threshold, goes there with no prefill hop.
func TestE2EPrefillDecodeHeaders(t *testing.T) {
	f := startFleetWith(t, fleetOptions{pods: 3, role: func(i int) kvpod.Role {
		return [3]kvpod.Role{kvpod.RolePrefill, kvpod.RoleDecode, kvpod.RoleDecode}[i]
	}})
	system := strings.Repeat("You plan database migrations step by step and explain each risk. ", 60) // ~800 tokens
	body := func(question string) string {
		return fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, question)
	}
	first, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/chat/completions", Body: []byte(body("Plan the first step."))})
	if err != nil || first.Status != 200 {
		t.Fatalf("routing = %v, %v", first, err)
	}
	dest, prefill := first.UpstreamHeaders[router.HeaderPod], first.UpstreamHeaders[router.HeaderPrefillPod]
	if dest == "sim-0" || prefill != "sim-0" || first.UpstreamHeaders["x-prefiller-host-port"] != f.pods["sim-0"] {
		t.Fatalf("a new prompt: to %s, prefill pod %q, x-prefiller-host-port %q; want a decode pod, and sim-0 at %s",
			dest, prefill, first.UpstreamHeaders["x-prefiller-host-port"], f.pods["sim-0"])
	}
	// The client's response names the prefill pod among the x-kvrouter-*
	// headers; the sidecar's header is the decode pod's alone.
	if first.ClientHeaders[router.HeaderPrefillPod] != "sim-0" || first.ClientHeaders["x-prefiller-host-port"] != "" {
		t.Errorf("response headers %v: want x-kvrouter-prefill-pod sim-0 and no x-prefiller-host-port", first.ClientHeaders)
	}
	// The decode pod computes the prompt here (the simulated pods have no
	// sidecar), so its events then hold it.
	forward(t, first, "/v1/chat/completions")
	_, total, _ := strings.Cut(first.UpstreamHeaders[router.HeaderCachedBlocks], "/")
	blocks, _ := strconv.Atoi(total)
	f.awaitEvents(t, dest, blocks)
	next, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/chat/completions", Body: []byte(body("Plan the first step, then the second."))})
	if err != nil || next.Status != 200 {
		t.Fatalf("routing = %v, %v", next, err)
	}
	if next.UpstreamHeaders[router.HeaderPod] != dest || next.UpstreamHeaders["x-prefiller-host-port"] != "" || next.UpstreamHeaders[router.HeaderPrefillPod] != "" {
		t.Errorf("the next turn: to %s, x-prefiller-host-port %q; want %s with no prefill hop", next.UpstreamHeaders[router.HeaderPod], next.UpstreamHeaders["x-prefiller-host-port"], dest)
	}
}
