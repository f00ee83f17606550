package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/tokenizer/hubtest"
)

// tinyRepo is Org/Tiny's files on the test hub.
func tinyRepo(t *testing.T) map[string][]byte {
	t.Helper()
	data, err := json.Marshal(tinyFile())
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"tokenizer.json":        data,
		"tokenizer_config.json": []byte(`{"model_max_length": 4096}`),
		"chat_template.jinja":   []byte("{{ messages }}"),
	}
}

// hubRegistry is a registry downloading from hub into a new cache.
func hubRegistry(t *testing.T, hub *hubtest.Hub, token string) *Registry {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HFCache, cfg.HubURL, cfg.HubToken = t.TempDir(), hub.URL, token
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHubDownload(t *testing.T) {
	hub := hubtest.New(t, "secret", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "secret")
	if _, err := r.For("Org/Tiny"); !errors.Is(err, ErrPending) {
		t.Fatalf("For(Org/Tiny) before the download = %v, want ErrPending", err)
	}
	r.work(t.Context(), <-r.queue)
	tok, err := r.For("Org/Tiny")
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := tok.Encode("he", false); len(ids) != 1 || ids[0] != 256 {
		t.Errorf("Encode(he) = %v, want [256]", ids)
	}
	repo := filepath.Join(r.cfg.HFCache, "models--Org--Tiny")
	for _, f := range hubFiles {
		if _, err := os.Stat(filepath.Join(repo, "snapshots", hubtest.Commit, f)); err != nil {
			t.Errorf("downloaded %s: %v", f, err)
		}
	}
	if ref, _ := os.ReadFile(filepath.Join(repo, "refs", "main")); string(ref) != hubtest.Commit {
		t.Errorf("refs/main = %q, want %s", ref, hubtest.Commit)
	}
	if s := r.Status("Org/Tiny"); !s.Ready || s.Pending || s.Err != nil {
		t.Errorf("Status(Org/Tiny) = %+v, want ready", s)
	}
	// An offline registry on the same cache finds the download, without the hub.
	before := hub.Requests()
	cfg := r.cfg
	cfg.Offline = true
	r2, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.For("Org/Tiny"); err != nil || hub.Requests() != before {
		t.Errorf("For(Org/Tiny) from the cache = %v, %d new requests", err, hub.Requests()-before)
	}
}

func TestHubRevision(t *testing.T) {
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	r.cfg.Repos = map[string]Repo{"tiny": {ID: "Org/Tiny", Revision: hubtest.Commit}}
	dir, err := r.Fetch(t.Context(), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Status("tiny"); !s.Ready { // the tokenizer checked is the one kept
		t.Errorf("Status(tiny) after Fetch = %+v, want ready without a second load", s)
	}
	if want := filepath.Join(r.cfg.HFCache, "models--Org--Tiny", "snapshots", hubtest.Commit); dir != want {
		t.Errorf("Fetch(tiny) = %s, want %s", dir, want)
	}
	if n := hub.Served("/Org/Tiny/resolve/" + hubtest.Commit + "/tokenizer.json"); n != 1 {
		t.Errorf("tokenizer.json fetched at the commit %d times, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(r.cfg.HFCache, "models--Org--Tiny", "refs")); err == nil {
		t.Errorf("a commit revision wrote refs/")
	}
	if _, err := r.For("tiny"); err != nil {
		t.Errorf("For(tiny) = %v", err)
	}
}

// TestHubSharedSnapshot: a snapshot vLLM's pods downloaded (weights, a
// config) gets the tokenizer files it lacks; its own stay.
func TestHubSharedSnapshot(t *testing.T) {
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	snapshot := filepath.Join(r.cfg.HFCache, "models--Org--Tiny", "snapshots", hubtest.Commit)
	must(t, os.MkdirAll(snapshot, 0o755))
	must(t, os.WriteFile(filepath.Join(snapshot, "tokenizer_config.json"), []byte(`{"pods": true}`), 0o600))
	must(t, os.WriteFile(filepath.Join(snapshot, "model.safetensors"), []byte("weights"), 0o600))
	if _, err := r.Fetch(t.Context(), "Org/Tiny"); err != nil {
		t.Fatal(err)
	}
	if s := r.Status("Org/Tiny"); s.Ready { // loaded from the snapshot, with the pods' files
		t.Errorf("Status(Org/Tiny) after a merged download = %+v, want it loaded from the snapshot on demand", s)
	}
	if b, _ := os.ReadFile(filepath.Join(snapshot, "tokenizer_config.json")); string(b) != `{"pods": true}` {
		t.Errorf("the pods' tokenizer_config.json = %q, want it kept", b)
	}
	if _, err := os.Stat(filepath.Join(snapshot, "tokenizer.json")); err != nil {
		t.Errorf("tokenizer.json not added to the shared snapshot: %v", err)
	}
}

func TestHubDownloadFailures(t *testing.T) {
	files := tinyRepo(t)
	notTokenizer := map[string][]byte{"tokenizer.json": []byte(`{"model": {"type": "Unigram2"}}`)}
	badJSON := map[string][]byte{"tokenizer.json": []byte(`{"model": `)}
	tests := []struct {
		name, model, token string
		tokenFile          string // "missing": a file that is not there
		fault              func(*hubtest.Hub)
		timeout            time.Duration
		want               []string // in the error
		unauthorized       bool
	}{
		{name: "unknown model", model: "Org/Missing", token: "secret", want: []string{`"Org/Missing"`, "404"}},
		{name: "not a repo id", model: "../etc", token: "secret", want: []string{`"../etc"`}},
		{name: "wrong token", model: "Org/Tiny", token: "wrong", want: []string{`"Org/Tiny"`, "401"}, unauthorized: true},
		{name: "no token", model: "Org/Tiny", want: []string{"401"}, unauthorized: true},
		{name: "missing token file", model: "Org/Tiny", tokenFile: "missing", want: []string{`"Org/Tiny"`, "HubTokenFile", "no such file"}},
		{name: "server error", model: "Org/Tiny", token: "secret", fault: func(h *hubtest.Hub) { h.FailWith(http.StatusBadGateway) }, want: []string{"502"}},
		{name: "truncated", model: "Org/Tiny", token: "secret", fault: func(h *hubtest.Hub) { h.Truncate(true) }, want: []string{"truncated"}},
		{name: "corrupt json", model: "Org/Bad", token: "secret", want: []string{"not valid JSON"}},
		{name: "not a tokenizer", model: "Org/Odd", token: "secret", want: []string{"tokenizer.json refused"}},
		{name: "slow", model: "Org/Tiny", token: "secret", fault: func(h *hubtest.Hub) { h.Slow(time.Minute) }, timeout: 50 * time.Millisecond, want: []string{"timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := hubtest.New(t, "secret", map[string]map[string][]byte{"Org/Tiny": files, "Org/Bad": badJSON, "Org/Odd": notTokenizer})
			if tt.fault != nil {
				tt.fault(hub)
			}
			r := hubRegistry(t, hub, tt.token)
			if tt.timeout > 0 {
				r.cfg.HubTimeout = tt.timeout
			}
			if tt.tokenFile != "" {
				r.cfg.HubTokenFile = filepath.Join(t.TempDir(), tt.tokenFile)
			}
			_, err := r.Fetch(t.Context(), tt.model)
			if err == nil || !errors.Is(err, ErrUnknownModel) || errors.Is(err, ErrHubUnauthorized) != tt.unauthorized {
				t.Fatalf("Fetch(%q) = %v, want ErrUnknownModel, unauthorized %v", tt.model, err, tt.unauthorized)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Fetch(%q) = %q, want it to say %q", tt.model, err, want)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Fetch(%q) error %q shows the token", tt.model, err)
			}
			noSnapshot(t, r.cfg.HFCache)
		})
	}
}

// noSnapshot fails when cache holds a snapshot or a temporary download.
func noSnapshot(t *testing.T, cache string) {
	t.Helper()
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".download-") {
			t.Errorf("temporary %s left behind", e.Name())
		}
		snaps, _ := os.ReadDir(filepath.Join(cache, e.Name(), "snapshots"))
		for _, s := range snaps {
			t.Errorf("snapshot %s/%s left behind", e.Name(), s.Name())
		}
	}
}

// TestHubBackoff: a failed download answers from its failure, without the
// hub, until its backoff ends.
func TestHubBackoff(t *testing.T) {
	hub := hubtest.New(t, "", nil)
	r := hubRegistry(t, hub, "")
	if _, err := r.For("Org/Missing"); !errors.Is(err, ErrPending) {
		t.Fatalf("For(Org/Missing) = %v, want ErrPending", err)
	}
	r.work(t.Context(), <-r.queue)
	before := hub.Requests()
	for range 3 {
		if _, err := r.For("Org/Missing"); !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), "404") {
			t.Errorf("For(Org/Missing) after the failure = %v, want its 404", err)
		}
	}
	if s := r.Status("Org/Missing"); s.Ready || s.Pending || s.Err == nil {
		t.Errorf("Status(Org/Missing) = %+v, want its failure", s)
	}
	if len(r.queue) != 0 || hub.Requests() != before {
		t.Errorf("backed-off model queued %d times, %d new requests", len(r.queue), hub.Requests()-before)
	}
	// Its backoff over, it is tried again, and stays failed meanwhile.
	r.mu.Lock()
	f := r.mu.failures["Org/Missing"]
	f.retry = time.Now().Add(-time.Second)
	r.mu.failures["Org/Missing"] = f
	r.mu.Unlock()
	if _, err := r.For("Org/Missing"); !strings.Contains(fmt.Sprint(err), "404") || len(r.queue) != 1 {
		t.Errorf("For(Org/Missing) after the backoff = %v with %d queued, want its 404 and a retry queued", err, len(r.queue))
	}
	if s := r.Status("Org/Missing"); !s.Pending || s.Err == nil {
		t.Errorf("Status(Org/Missing) while retried = %+v, want pending with its failure", s)
	}
}

func TestHubOffline(t *testing.T) {
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	r.cfg.Offline = true
	if _, err := r.For("Org/Tiny"); !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), "offline") {
		t.Errorf("For(Org/Tiny) offline = %v, want ErrUnknownModel saying offline", err)
	}
	if _, err := r.Fetch(t.Context(), "Org/Tiny"); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("Fetch(Org/Tiny) offline = %v, want ErrUnknownModel", err)
	}
	r.Prefetch("Org/Tiny")
	r.work(t.Context(), <-r.queue)
	if hub.Requests() != 0 || r.Downloads() != 0 {
		t.Errorf("offline: %d requests, %d downloads, want none", hub.Requests(), r.Downloads())
	}
	// The pods sharing the cache download it: found at once, no backoff.
	r.Prefetch("Org/Tiny")
	if len(r.queue) != 1 {
		t.Fatalf("a model missing offline queued %d times after its failure, want 1 (no backoff)", len(r.queue))
	}
	snapshot := filepath.Join(r.cfg.HFCache, "models--Org--Tiny", "snapshots", "abc")
	writeTiny(t, snapshot)
	r.work(t.Context(), <-r.queue)
	if s := r.Status("Org/Tiny"); !s.Ready {
		t.Errorf("Status(Org/Tiny) once the pods downloaded it = %+v, want ready", s)
	}
}

// TestHubOneDownload: concurrent first requests for a model make one
// download.
func TestHubOneDownload(t *testing.T) {
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	for range 16 { // the first requests queue it once
		if _, err := r.For("Org/Tiny"); !errors.Is(err, ErrPending) {
			t.Fatalf("For(Org/Tiny) = %v, want ErrPending", err)
		}
	}
	if len(r.queue) != 1 {
		t.Fatalf("queued %d times, want 1", len(r.queue))
	}
	<-r.queue
	r.mu.queued = map[string]bool{}
	// Callers of Fetch at once share one download.
	waiting := hub.Hold()
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	for i := range dirs {
		wg.Go(func() {
			var err error
			if dirs[i], err = r.Fetch(t.Context(), "Org/Tiny"); err != nil {
				t.Error(err)
			}
		})
	}
	<-waiting
	hub.Release()
	wg.Wait()
	if n := hub.Served("/Org/Tiny/resolve/main/tokenizer.json"); n != 1 || r.Downloads() != 1 {
		t.Errorf("tokenizer.json served %d times in %d downloads, want 1 and 1", n, r.Downloads())
	}
	for _, d := range dirs {
		if d != dirs[0] || d == "" {
			t.Errorf("Fetch dirs = %q, want one", dirs)
			break
		}
	}
}

// TestHubRun: Run downloads what Prefetch queues and stops with its
// context, a download under way included.
func TestHubRun(t *testing.T) {
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t), "Org/Held": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	r.Prefetch("Org/Tiny")
	deadline := time.Now().Add(10 * time.Second)
	for !r.Status("Org/Tiny").Ready && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a state, not synchronizing
	}
	if s := r.Status("Org/Tiny"); !s.Ready {
		t.Fatalf("Status(Org/Tiny) after Run = %+v, want ready", s)
	}
	waiting := hub.Hold()
	r.Prefetch("Org/Held")
	<-waiting
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if s := r.Status("Org/Held"); s.Ready || s.Err != nil {
		t.Errorf("Status(Org/Held) after a canceled download = %+v, want neither ready nor failed", s)
	}
	if _, err := os.Stat(filepath.Join(r.cfg.HFCache, "models--Org--Held")); err == nil {
		t.Errorf("a canceled download left models--Org--Held")
	}
}

// TestHubStaleTemporaries: a download removes the temporaries of killed
// ones, not those of downloads under way.
func TestHubStaleTemporaries(t *testing.T) {
	hub := hubtest.New(t, "", map[string]map[string][]byte{"Org/Tiny": tinyRepo(t)})
	r := hubRegistry(t, hub, "")
	old, young := filepath.Join(r.cfg.HFCache, ".download-old"), filepath.Join(r.cfg.HFCache, ".download-young")
	must(t, os.MkdirAll(old, 0o755))
	must(t, os.WriteFile(filepath.Join(old, "tokenizer.json"), []byte(`{"half`), 0o600))
	must(t, os.MkdirAll(young, 0o755))
	long := time.Now().Add(-2 * staleAfter(r.cfg.HubTimeout))
	must(t, os.Chtimes(old, long, long))
	if _, err := r.Fetch(t.Context(), "Org/Tiny"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Errorf("stale %s kept", old)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("recent %s removed: %v", young, err)
	}
}
