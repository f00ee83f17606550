package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestResponseIDsBounded(t *testing.T) {
	r := newResponseIDs(3)
	for i := range 4 {
		r.put(fmt.Sprintf("resp_%d", i), "a")
	}
	r.put("resp_3", "b") // known: updated, nothing forgotten
	for i, want := range []string{"", "a", "a", "b"} {
		pod, ok := r.get(fmt.Sprintf("resp_%d", i))
		if pod != want || ok != (want != "") {
			t.Errorf("get(resp_%d) = %q, %v, want %q", i, pod, ok, want)
		}
	}
	if len(r.pods) != 3 {
		t.Errorf("%d ids kept, want 3", len(r.pods))
	}
}

func TestResponseIDReader(t *testing.T) {
	long := strings.Repeat(" ", responseIDWindow)
	for _, tt := range []struct{ name, reply, want string }{
		{"object", `{"id":"resp_abc","object":"response","output":[{"id":"msg_1"}]}`, "resp_abc"},
		{"stream", "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\": \"resp_9f\",\"status\":\"in_progress\"}}\n\n", "resp_9f"},
		{"other ids first", `{"item_id":"resp_no","x":{"id":"msg_1"},"id" : "resp_2"}`, "resp_2"},
		{"escaped", `{"id":"resp_\u0031"}`, ""},
		{"beyond the window", long + `{"id":"resp_late"}`, ""},
		{"none", `{"error":{"message":"no"}}`, ""},
	} {
		// Every split of the reply in two pieces finds the same id, once.
		for cut := 0; cut <= len(tt.reply); cut += max(1, len(tt.reply)/97) {
			var rd ResponseIDReader
			got := rd.Feed([]byte(tt.reply[:cut]))
			if again := rd.Feed([]byte(tt.reply[cut:])); got == "" {
				got = again
			} else if again != "" {
				t.Errorf("%s cut at %d: found %q twice", tt.name, cut, again)
			}
			if got != tt.want {
				t.Errorf("%s cut at %d: Feed = %q, want %q", tt.name, cut, got, tt.want)
				break
			}
		}
	}
}

func TestResponseIDOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/responses/resp_1":        "resp_1",
		"/v1/responses/resp_1/cancel": "resp_1",
		"/v1/responses/resp_1?x=y":    "resp_1",
		"/v1/responses/":              "",
		"/v1/responses/a/b":           "",
		"/v1/models":                  "",
	} {
		if got := responseIDOf(KindOther, nil, path); got != want {
			t.Errorf("responseIDOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestRouteToResponsePod: requests naming a response the router learned go
// to the pod that produced it, whatever its cost; a gone pod gives vLLM's
// 404; an id never learned routes like any request.
func TestRouteToResponsePod(t *testing.T) {
	tr := newTestRouter(t)
	first, err := tr.route("/v1/responses", `{"model":"llama","input":"hello"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !first.LearnsResponseID() {
		t.Fatal("a Responses decision does not learn its response id")
	}
	first.ResponseID("resp_1")
	first.Done()
	other := map[string]string{"a": "b", "b": "c", "c": "a"}[first.Pod]
	tr.store(other, prompt, "", "") // cached elsewhere: the pinned requests ignore it
	follow := fmt.Sprintf(`{"model":"llama","input":%q,"previous_response_id":"resp_1"}`, prompt)
	for _, q := range []struct{ path, body string }{
		{"/v1/responses", follow},
		{"/v1/responses/resp_1", ""},
		{"/v1/responses/resp_1/cancel", ""},
	} {
		d, err := tr.route(q.path, q.body)
		if err != nil || d.Pod != first.Pod || d.Reason != ReasonResponse {
			t.Fatalf("%s: Route = %+v, %v, want %s for reason %s", q.path, d, err, first.Pod, ReasonResponse)
		}
		d.Done()
	}
	d, err := tr.route("/v1/responses", strings.Replace(follow, "resp_1", "resp_unknown", 1))
	if err != nil || d.Reason != ReasonPrefix || d.Matched == 0 {
		t.Fatalf("unknown id: Route = %+v, %v, want it routed by prefix", d, err)
	}
	d.Done()
	tr.fleet.Remove(first.Pod)
	_, err = tr.route("/v1/responses", follow)
	e := AsError(err)
	if e == nil || e.Status != http.StatusNotFound {
		t.Fatalf("pod gone: Route = %v, want a 404", err)
	}
	var body struct {
		Error struct{ Message, Type, Param string }
	}
	if err := json.Unmarshal(e.Body("/v1/responses"), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Message != "Response with id 'resp_1' not found." || body.Error.Type != "invalid_request_error" || body.Error.Param != "response_id" {
		t.Errorf("404 body = %+v", body.Error)
	}
}
