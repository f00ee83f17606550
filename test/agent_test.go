package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/proxy"
	"github.com/kvrouter/kvrouter/router"
)

// upstream plays the pod Envoy sends a routed request to: the request goes
// to the simulated pod at the destination with the headers ext_proc set,
// and its reply (streamed or not) comes back in the pieces it was read in.
func upstream(t *testing.T, path string) func(string, map[string]string, []byte) (*envoyclient.Reply, error) {
	return func(dest string, headers map[string]string, body []byte) (*envoyclient.Reply, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+dest+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, v := range headers {
			if !strings.HasPrefix(k, ":") {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		reply := &envoyclient.Reply{Status: resp.StatusCode, Headers: [][2]string{{"content-type", resp.Header.Get("Content-Type")}}}
		buf := make([]byte, 512)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				reply.Chunks = append(reply.Chunks, bytes.Clone(buf[:n]))
			}
			if err == io.EOF {
				return reply, nil
			}
			if err != nil {
				return nil, err
			}
		}
	}
}

// agentAPI is how one API's agent conversation grows, turn by turn.
type agentAPI struct {
	path string
	// body is the request of turn n of conversation c, after the replies
	// of the turns before.
	body func(c int, replies []string, stream bool) string
	// cached reads the prompt tokens the pod's cache held from its reply.
	cached func(t *testing.T, reply []byte) int
}

var agentSystem = strings.Repeat("You are a coding agent. Read files before editing them, run the tests after every change, and explain each step. ", 8)

var agentTools = `[{"name":"read_file","description":"Read a file of the repository.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}},` +
	`{"name":"run_tests","description":"Run the package's tests.","input_schema":{"properties":{"pkg":{"type":"string"}}}}]`

// anthropicAPI: each turn resends the conversation: the task, then per
// earlier turn the assistant's reply with a tool call and the tool's result.
var anthropicAPI = agentAPI{
	path: "/v1/messages",
	body: func(c int, replies []string, stream bool) string {
		msgs := []string{fmt.Sprintf(`{"role":"user","content":"Task %d: make the failing test in pkg/cache pass."}`, c)}
		for i, r := range replies {
			msgs = append(msgs,
				fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"Step %d.","signature":"s"},{"type":"text","text":%q},{"type":"tool_use","id":"toolu_%d","name":"read_file","input":{"path":"pkg/cache/lru_%d.go"}}]}`, i, r, i, i),
				fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":[{"type":"text","text":"package cache // file %d of conversation %d"}]},{"type":"text","text":"Go on."}]}`, i, i, c))
		}
		return fmt.Sprintf(`{"model":"qwen3","max_tokens":256,"stream":%t,"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}},{"type":"text","text":" Conversation %d."}],"tools":%s,"messages":[%s]}`,
			stream, agentSystem, c, agentTools, strings.Join(msgs, ","))
	},
	cached: func(t *testing.T, reply []byte) int {
		t.Helper()
		// Non-streamed: the message; streamed: message_start's message.
		if i := bytes.Index(reply, []byte("data: ")); i >= 0 && bytes.HasPrefix(reply, []byte("event: ")) {
			reply = reply[i+6 : i+6+bytes.IndexByte(reply[i:], '\n')-6]
			var ev struct{ Message json.RawMessage }
			if err := json.Unmarshal(reply, &ev); err != nil {
				t.Fatal(err)
			}
			reply = ev.Message
		}
		var m struct {
			Usage struct {
				Cached *int `json:"cache_read_input_tokens"`
			}
		}
		if err := json.Unmarshal(reply, &m); err != nil || m.Usage.Cached == nil {
			t.Fatalf("reply %s: %v", reply, err)
		}
		return *m.Usage.Cached
	},
}

// responsesAPI: each turn resends the conversation as input items: the
// task, then per earlier turn the reasoning, the assistant's message, a
// function call and its output.
var responsesAPI = agentAPI{
	path: "/v1/responses",
	body: func(c int, replies []string, stream bool) string {
		items := []string{fmt.Sprintf(`{"role":"user","content":[{"type":"input_text","text":"Task %d: make the failing test in pkg/cache pass."}]}`, c)}
		for i, r := range replies {
			items = append(items,
				fmt.Sprintf(`{"type":"reasoning","id":"rs_%d","summary":[],"content":[{"type":"reasoning_text","text":"Step %d."}]}`, i, i),
				fmt.Sprintf(`{"type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, r),
				fmt.Sprintf(`{"type":"function_call","call_id":"call_%d","name":"read_file","arguments":"{\"path\":\"pkg/cache/lru_%d.go\"}"}`, i, i),
				fmt.Sprintf(`{"type":"function_call_output","call_id":"call_%d","output":"package cache // file %d of conversation %d"}`, i, i, c))
		}
		return fmt.Sprintf(`{"model":"qwen3","stream":%t,"instructions":%q,"tools":[{"type":"function","name":"read_file","description":"Read a file.","parameters":{"type":"object","properties":{"path":{"type":"string"}}}},{"type":"web_search"}],"input":[%s]}`,
			stream, agentSystem+fmt.Sprintf(" Conversation %d.", c), strings.Join(items, ","))
	},
	cached: func(t *testing.T, reply []byte) int {
		t.Helper()
		// Streamed: the response.completed event's response.
		if i := bytes.LastIndex(reply, []byte("event: response.completed\ndata: ")); i >= 0 {
			reply = bytes.TrimSpace(reply[i+len("event: response.completed\ndata: "):])
			var ev struct{ Response json.RawMessage }
			if err := json.Unmarshal(reply, &ev); err != nil {
				t.Fatal(err)
			}
			reply = ev.Response
		}
		var r struct {
			Usage struct {
				Details struct {
					Cached *int `json:"cached_tokens"`
				} `json:"input_tokens_details"`
			}
		}
		if err := json.Unmarshal(reply, &r); err != nil || r.Usage.Details.Cached == nil {
			t.Fatalf("reply %s: %v", reply, err)
		}
		return *r.Usage.Details.Cached
	},
}

// TestE2EAgentAPIs: six agent conversations per API, each resending its
// growing history (system prompt, tools, earlier tool calls and results)
// every turn, through ext_proc to the simulated pods, which render them as
// vLLM does and answer in the API's shape (every other turn streamed, the
// reply passing back through ext_proc). Every turn after the first goes to
// the pod holding the conversation, and kvrouter's cached blocks are
// exactly the prompt's blocks that pod's cache served.
func TestE2EAgentAPIs(t *testing.T) {
	for name, api := range map[string]agentAPI{"messages": anthropicAPI, "responses": responsesAPI} {
		t.Run(name, func(t *testing.T) { agentConversations(t, api) })
	}
}

func agentConversations(t *testing.T, api agentAPI) {
	f := startFleet(t)
	bs := 16 // blockhash.DefaultConfig's block size, the pods' too
	for c := range 6 {
		var pod string
		var replies []string
		for turn := range 4 {
			body := api.body(c, replies, turn%2 == 1)
			res, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: api.path, Body: []byte(body), Chunks: []int{100}, Upstream: upstream(t, api.path)})
			if err != nil || res.Status != 200 {
				t.Fatalf("conversation %d turn %d: %+v, %v", c, turn, res, err)
			}
			got, reason := res.UpstreamHeaders[router.HeaderPod], res.UpstreamHeaders[router.HeaderReason]
			matched, _, _ := strings.Cut(res.UpstreamHeaders[router.HeaderCachedBlocks], "/")
			blocks, _ := strconv.Atoi(matched)
			cached := api.cached(t, res.ClientBody)
			if turn == 0 {
				pod = got
			} else if got != pod || reason != "prefix" || blocks == 0 {
				t.Fatalf("conversation %d turn %d: to %s (%s, %s blocks), want %s by prefix", c, turn, got, reason, res.UpstreamHeaders[router.HeaderCachedBlocks], pod)
			}
			if blocks*bs != cached {
				t.Fatalf("conversation %d turn %d: x-kvrouter-cached-blocks %s, but the pod's cache held %d tokens (%d blocks)",
					c, turn, res.UpstreamHeaders[router.HeaderCachedBlocks], cached, cached/bs)
			}
			f.awaitExact(t, pod, f.sims[pod].Cached)
			replies = append(replies, strings.TrimSpace(replyText(t, res.ClientBody)))
		}
	}
}

// replyText is the text of an Anthropic or Responses reply, streamed or
// not: the reply's words, as the client reads them.
func replyText(t *testing.T, reply []byte) string {
	t.Helper()
	var b strings.Builder
	if bytes.HasPrefix(reply, []byte("event: ")) {
		for line := range strings.SplitSeq(string(reply), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Type  string
				Delta json.RawMessage
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			switch ev.Type {
			case "content_block_delta":
				var d struct{ Text string }
				_ = json.Unmarshal(ev.Delta, &d)
				b.WriteString(d.Text)
			case "response.output_text.delta":
				var d string
				_ = json.Unmarshal(ev.Delta, &d)
				b.WriteString(d)
			}
		}
		return b.String()
	}
	var m struct {
		Content []struct{ Text string }
		Output  []struct{ Content []struct{ Text string } }
	}
	if err := json.Unmarshal(reply, &m); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	for _, o := range m.Output {
		for _, c := range o.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// responseID reads a Responses reply's id, streamed or not.
func responseID(t *testing.T, reply []byte) string {
	t.Helper()
	var rd router.ResponseIDReader
	id := rd.Feed(reply)
	if !strings.HasPrefix(id, "resp_") {
		t.Fatalf("no response id in %q", reply)
	}
	return id
}

// TestE2EPreviousResponse: a Responses request naming a previous response
// reaches the pod that produced it (the only one that stored it), as do
// GET /v1/responses/{id} and its cancel, through ext_proc (the reply read
// as it streams back, or asked of an Envoy that sends no response body
// when extproc.response_ids is on) and through the proxy.
func TestE2EPreviousResponse(t *testing.T) {
	f := startFleet(t)
	first := func(c int, stream bool) string { return responsesAPI.body(c, nil, stream) }
	next := func(c int, id string) string {
		return fmt.Sprintf(`{"model":"qwen3","previous_response_id":%q,"input":"Conversation %d: now run the tests."}`, id, c)
	}
	check := func(t *testing.T, what, pod string, res *envoyclient.Result, err error) {
		t.Helper()
		if err != nil || res.Status != 200 || res.UpstreamHeaders[router.HeaderPod] != pod || res.UpstreamHeaders[router.HeaderReason] != "response" {
			t.Fatalf("%s: %+v, %v; want %s for reason response", what, res, err, pod)
		}
	}
	t.Run("extproc", func(t *testing.T) {
		for c := range 4 {
			res, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/responses", Body: []byte(first(c, c%2 == 0)), Upstream: upstream(t, "/v1/responses")})
			if err != nil || res.Status != 200 {
				t.Fatalf("first turn: %+v, %v", res, err)
			}
			pod, id := res.UpstreamHeaders[router.HeaderPod], responseID(t, res.ClientBody)
			res, err = f.envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/responses", Body: []byte(next(c, id)), Upstream: upstream(t, "/v1/responses")})
			check(t, "previous_response_id", pod, res, err)
			res, err = f.envoy.Do(t.Context(), envoyclient.Request{Method: "GET", Path: "/v1/responses/" + id})
			check(t, "GET", pod, res, err)
		}
	})
	t.Run("asked of Envoy", func(t *testing.T) {
		for _, on := range []bool{false, true} {
			cfg := extproc.DefaultConfig()
			cfg.ResponseIDs = on
			envoy := serveExtProc(t, cfg, f.router)
			envoy.NoResponseBody = true
			res, err := envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/responses", Body: []byte(first(10+btoi(on), false)), Upstream: upstream(t, "/v1/responses")})
			if err != nil || res.Status != 200 || res.BodyAsked != on {
				t.Fatalf("response_ids %t: %+v, %v; want the body asked for: %t", on, res, err, on)
			}
			pod, id := res.UpstreamHeaders[router.HeaderPod], responseID(t, res.ClientBody)
			res, err = envoy.Do(t.Context(), envoyclient.Request{Path: "/v1/responses", Body: []byte(next(10, id))})
			if on {
				check(t, "previous_response_id", pod, res, err)
			} else if err != nil || res.UpstreamHeaders[router.HeaderReason] == "response" {
				t.Fatalf("response_ids off: %+v, %v; want the id unknown", res, err)
			}
		}
	})
	t.Run("proxy", func(t *testing.T) {
		srv := httptest.NewServer(proxy.New(f.router, 1<<20, nil, slog.New(slog.DiscardHandler)))
		t.Cleanup(srv.Close)
		post := func(path, body string) (pod, reason string, reply []byte) {
			resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			reply, _ = io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %s %s", path, resp.Status, reply)
			}
			return resp.Header.Get(router.HeaderPod), resp.Header.Get(router.HeaderReason), reply
		}
		for c := 20; c < 24; c++ {
			pod, _, reply := post("/v1/responses", first(c, c%2 == 0))
			id := responseID(t, reply)
			if got, reason, _ := post("/v1/responses", next(c, id)); got != pod || reason != "response" {
				t.Fatalf("previous_response_id: to %s (%s), want %s for reason response", got, reason, pod)
			}
			if got, reason, _ := post("/v1/responses/"+id+"/cancel", ""); got != pod || reason != "response" {
				t.Fatalf("cancel: to %s (%s), want %s", got, reason, pod)
			}
		}
		// A pod gone: vLLM's 404 in OpenAI's shape.
		pod, _, reply := post("/v1/responses", first(30, false))
		f.routes.Remove(pod)
		resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(next(30, responseID(t, reply))))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(body), `"message":"Response with id 'resp_`) {
			t.Fatalf("pod gone: %s %s, want vLLM's 404", resp.Status, body)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// serveExtProc runs another ext_proc server on r with cfg and returns an
// Envoy-faithful client of it.
func serveExtProc(t *testing.T, cfg extproc.Config, r *router.Router) *envoyclient.Client {
	t.Helper()
	ext, err := extproc.New(cfg, r, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ext.Run(t.Context(), lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return envoyclient.New(conn)
}

// TestE2EAgentRefusals: a body vLLM refuses gets vLLM's status and an error
// in its API's own shape, and is routed nowhere.
func TestE2EAgentRefusals(t *testing.T) {
	f := startFleet(t)
	for _, tt := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v1/messages", `{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens is required"}}`},
		{"/v1/messages", `{"model":"qwen3","max_tokens":8,"messages":[{"role":"user","content":[{"type":"video"}]}]}`, 400, `"type":"invalid_request_error"`},
		{"/v1/messages", `{"model":"nope","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 404, `{"type":"error","error":{"type":"not_found_error"`},
		{"/v1/responses", `{"model":"qwen3","input":[{"type":"function_call","name":"f"}]}`, 400, `{"error":{"message":"input[0].call_id must be a string","type":"invalid_request_error","param":"input[0].call_id","code":400}}`},
	} {
		res, err := f.envoy.Do(t.Context(), envoyclient.Request{Path: tt.path, Body: []byte(tt.body)})
		if err != nil || res.Status != tt.status || res.Destination != "" || !strings.Contains(string(res.ClientBody), tt.want) {
			t.Errorf("%s %s: %+v, %v; want %d with %s", tt.path, tt.body, res, err, tt.status, tt.want)
		}
	}
}
