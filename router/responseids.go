package router

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/kvrouter/kvrouter/router/fleet"
)

// vLLM keeps a Responses API response (with store) in the memory of the
// server that produced it: a request continuing it (previous_response_id)
// or reading or canceling it (GET /v1/responses/{id}, POST
// /v1/responses/{id}/cancel) fails anywhere else. The router remembers
// which pod produced each response id it learned (Decision.ResponseID) and
// sends those requests there.

// responseIDs is the ids learned, with the pod that produced each, up to
// a bound: the oldest learned is forgotten first.
type responseIDs struct {
	mu   sync.Mutex
	pods map[string]string
	ring []string // the ids in the order learned, a circle of len max
	next int
}

func newResponseIDs(n int) *responseIDs {
	return &responseIDs{pods: make(map[string]string, min(n, 1<<12)), ring: make([]string, n)}
}

func (r *responseIDs) put(id, pod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pods[id]; ok {
		r.pods[id] = pod
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.pods, old)
	}
	r.ring[r.next], r.pods[id] = id, pod
	r.next = (r.next + 1) % len(r.ring)
}

func (r *responseIDs) get(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pod, ok := r.pods[id]
	return pod, ok
}

// ResponseSharer is an Index that shares the response ids the replicas
// learned (a *redisindex.Index): a replica that did not see a response
// asks it.
type ResponseSharer interface {
	ShareResponse(id, pod string)
	SharedResponse(id string) (pod string, ok bool)
}

// responseIDOf is the response id whose pod req must reach: a Responses
// request's previous_response_id, or the id of GET /v1/responses/{id} and
// POST /v1/responses/{id}/cancel; "" for any other request.
func responseIDOf(kind Kind, p *Parsed, path string) string {
	if kind == KindResponses {
		return p.PreviousResponseID
	}
	if kind != KindOther {
		return ""
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	id, ok := strings.CutPrefix(path, "/v1/responses/")
	if !ok {
		return ""
	}
	id = strings.TrimSuffix(id, "/cancel")
	if id == "" || strings.Contains(id, "/") {
		return ""
	}
	return id
}

// responsePod is the pod that produced response id, when the router
// learned it.
func (r *Router) responsePod(id string) (string, bool) {
	if r.responses == nil || id == "" {
		return "", false
	}
	if pod, ok := r.responses.get(id); ok {
		return pod, true
	}
	if s, ok := r.index.(ResponseSharer); ok {
		if pod, ok := s.SharedResponse(id); ok {
			r.responses.put(id, pod)
			return pod, true
		}
	}
	return "", false
}

// pin finds the pod that produced response id among the ready pods of t
// (any ready pod when t is nil) that subset allows, made a candidate if the
// candidates left it out (a blind pod): 1 + its index in sc.members; 0
// when the router did not learn id, -1 when that pod is gone.
func (r *Router) pin(snap *fleet.Snapshot, t *fleet.Target, id string, subset *Subset, sc *scratch) int {
	pod, ok := r.responsePod(id)
	if !ok {
		return 0
	}
	if i := slices.IndexFunc(sc.members, func(m *fleet.Member) bool { return m.Pod.Name == pod }); i >= 0 {
		return i + 1
	}
	members := snap.Members()
	if t != nil {
		members = t.Members
	}
	for _, m := range members {
		if m.Pod.Name == pod && m.Pod.Ready && subset.Allows(m.Endpoint) {
			sc.members = append(sc.members, m)
			return len(sc.members)
		}
	}
	return -1
}

// responseGone is vLLM's 404 for a response it does not hold: the pod
// that produced it is gone.
func responseGone(id string) *Error {
	return &Error{
		Status: http.StatusNotFound, Type: "invalid_request_error", Param: "response_id",
		Message: "Response with id '" + id + "' not found.",
	}
}

// ResponseID records that the decision's pod produced the Responses API
// response id, so that requests continuing, reading or canceling it are
// sent there. The front ends read it from the reply (ResponseIDReader).
func (d *Decision) ResponseID(id string) {
	r := d.router
	if r == nil || r.responses == nil || id == "" {
		return
	}
	r.responses.put(id, d.Pod)
	if s, ok := r.index.(ResponseSharer); ok {
		s.ShareResponse(id, d.Pod)
	}
}

// LearnsResponseID reports whether the front end should read the response
// id from the decision's reply: a Responses request, with the router
// remembering ids.
func (d *Decision) LearnsResponseID() bool {
	return d.API == KindResponses && d.router != nil && d.router.responses != nil
}

// ResponseIDReader finds the response id in the first bytes of a Responses
// API reply, streamed (the response.created event) or not (the response
// object), as they pass: vLLM writes the response's id before its other
// fields, so it is looked for in the first responseIDWindow bytes only.
type ResponseIDReader struct {
	head []byte
	done bool
}

const responseIDWindow = 8 << 10

// Feed reads the next piece of the reply and returns the id once found
// (then "" for every later piece).
func (r *ResponseIDReader) Feed(p []byte) string {
	if r.done {
		return ""
	}
	r.head = append(r.head, p[:min(len(p), responseIDWindow-len(r.head))]...)
	id, found := findResponseID(r.head)
	if found || len(r.head) >= responseIDWindow {
		r.done, r.head = true, nil
	}
	return id
}

// findResponseID finds the first `"id": "resp...` member in b.
func findResponseID(b []byte) (string, bool) {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(`"id"`))
		if i < 0 {
			return "", false
		}
		rest := bytes.TrimLeft(b[off+i+4:], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			rest = bytes.TrimLeft(rest[1:], " \t\r\n")
			if len(rest) > 0 && rest[0] == '"' {
				end := bytes.IndexByte(rest[1:], '"')
				if end < 0 {
					return "", false // the id goes on in a later piece
				}
				if id := rest[1 : 1+end]; bytes.HasPrefix(id, []byte("resp")) && bytes.IndexByte(id, '\\') < 0 {
					return string(id), true
				}
			}
		}
		off += i + 4
	}
}
