// Package hubtest is a local Hugging Face hub for tests: it serves
// repositories' files at the hub's resolve paths, with the faults a real
// hub or mirror shows (refused tokens, errors, truncated bodies, slowness).
package hubtest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Hub is a local hub. Set its fields before the first request; the fault
// fields may be changed at any time through the methods.
type Hub struct {
	// URL is the hub's base URL.
	URL string
	srv *httptest.Server
	// Token, when set, is the bearer token every request must carry (401
	// otherwise).
	token string
	// repos maps ORG/NAME to its files by name.
	repos    map[string]map[string][]byte
	requests atomic.Int64
	mu       struct {
		sync.Mutex
		status   int           // answer every request with this status; 0: none
		truncate bool          // announce the whole body, send half
		delay    time.Duration // pause this long after the headers, before the body
		hold     chan struct{} // while open, bodies wait for it (closed: go on)
		waiting  chan struct{} // closed when the first body waits for hold
		perPath  map[string]int
	}
}

// Commit is the commit every repository is at (X-Repo-Commit).
const Commit = "0123456789abcdef0123456789abcdef01234567"

// New starts a hub serving repos (ORG/NAME to files) to requests bearing
// token ("" : any request); it stops with the test.
func New(t interface{ Cleanup(func()) }, token string, repos map[string]map[string][]byte) *Hub {
	h := &Hub{token: token, repos: repos}
	h.mu.perPath = map[string]int{}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	h.URL = h.srv.URL
	t.Cleanup(h.Close)
	return h
}

// Close stops the hub.
func (h *Hub) Close() {
	h.Release()
	h.srv.CloseClientConnections()
	h.srv.Close()
}

// Requests is how many requests the hub received.
func (h *Hub) Requests() int64 { return h.requests.Load() }

// Served is how many requests asked for path (/ORG/NAME/resolve/REV/FILE).
func (h *Hub) Served(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.perPath[path]
}

// FailWith answers every request with status (0: serve again).
func (h *Hub) FailWith(status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.status = status
}

// Truncate sends half of each file while announcing all of it.
func (h *Hub) Truncate(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.truncate = on
}

// Slow pauses each answer d after its headers, before its body.
func (h *Hub) Slow(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.delay = d
}

// Hold makes every answer send half its body and wait until Release; the
// returned channel is closed when the first answer starts waiting.
func (h *Hub) Hold() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.hold = make(chan struct{})
	h.mu.waiting = make(chan struct{})
	return h.mu.waiting
}

// Release lets held answers go on.
func (h *Hub) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.hold != nil {
		close(h.mu.hold)
		h.mu.hold = nil
	}
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	h.mu.Lock()
	h.mu.perPath[r.URL.Path]++
	status, truncate, delay, hold := h.mu.status, h.mu.truncate, h.mu.delay, h.mu.hold
	h.mu.Unlock()
	if h.token != "" && r.Header.Get("Authorization") != "Bearer "+h.token {
		http.Error(w, "Invalid credentials", http.StatusUnauthorized)
		return
	}
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	id, rest, ok := cutRepo(r.URL.Path)
	files := h.repos[id]
	rev, file, ok2 := strings.Cut(rest, "/")
	data, found := files[file]
	if !ok || !ok2 || files == nil || !found || (rev != "main" && rev != Commit) {
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", Commit)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if hold != nil {
		_, _ = w.Write(data[:len(data)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		data = data[len(data)/2:]
		h.mu.Lock()
		if h.mu.waiting != nil {
			close(h.mu.waiting)
			h.mu.waiting = nil
		}
		h.mu.Unlock()
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if truncate {
		data = data[:len(data)/2]
	}
	_, _ = w.Write(data)
}

// cutRepo splits /ORG/NAME/resolve/REST.
func cutRepo(path string) (id, rest string, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 4)
	if len(parts) != 4 || parts[2] != "resolve" {
		return "", "", false
	}
	return parts[0] + "/" + parts[1], parts[3], true
}
