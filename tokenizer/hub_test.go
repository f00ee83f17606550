package tokenizer

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeHub serves Org/Tiny's tokenizer.json at the hub's resolve paths, for
// requests carrying the token, and 404 for everything else.
func fakeHub(t *testing.T, requests *atomic.Int32) *httptest.Server {
	t.Helper()
	data, err := json.Marshal(tinyFile())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/Org/Tiny/resolve/main/tokenizer.json":
			w.Header().Set("X-Repo-Commit", "0123abc")
			_, _ = w.Write(data)
		case "/Org/Tiny/resolve/main/chat_template.jinja":
			w.Header().Set("X-Repo-Commit", "0123abc")
			_, _ = w.Write([]byte("{{ messages }}"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHubDownload(t *testing.T) {
	var requests atomic.Int32
	srv := fakeHub(t, &requests)
	cache := t.TempDir()
	cfg := DefaultConfig()
	cfg.HFCache, cfg.HubURL, cfg.HubToken = cache, srv.URL, "secret"
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := r.For("Org/Tiny")
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := tok.Encode("he", false); len(ids) != 1 || ids[0] != 256 {
		t.Errorf("Encode(he) = %v, want [256]", ids)
	}
	snapshot := filepath.Join(cache, "models--Org--Tiny", "snapshots", "0123abc")
	for _, f := range []string{"tokenizer.json", "chat_template.jinja"} {
		if _, err := os.Stat(filepath.Join(snapshot, f)); err != nil {
			t.Errorf("downloaded %s: %v", f, err)
		}
	}
	if ref, _ := os.ReadFile(filepath.Join(cache, "models--Org--Tiny", "refs", "main")); string(ref) != "0123abc" {
		t.Errorf("refs/main = %q, want 0123abc", ref)
	}
	// A second registry finds the download in the cache, without the hub.
	srv.Close()
	before := requests.Load()
	r2, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.For("Org/Tiny"); err != nil || requests.Load() != before {
		t.Errorf("For(Org/Tiny) from the cache = %v, %d new requests", err, requests.Load()-before)
	}
}

func TestHubDownloadFailures(t *testing.T) {
	var requests atomic.Int32
	srv := fakeHub(t, &requests)
	tests := []struct {
		model, token string
		unknown      bool
	}{
		{"Org/Missing", "secret", true},
		{"../etc", "secret", true},
		{"Org/Tiny", "wrong", false},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		cfg.HFCache, cfg.HubURL, cfg.HubToken = t.TempDir(), srv.URL, tt.token
		r, err := NewRegistry(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.For(tt.model)
		if err == nil || errors.Is(err, ErrUnknownModel) != tt.unknown {
			t.Errorf("For(%q) with token %q = %v, want unknown-model %v", tt.model, tt.token, err, tt.unknown)
		}
		if err != nil && strings.Contains(err.Error(), tt.token) {
			t.Errorf("For(%q) error %q shows the token", tt.model, err)
		}
		entries, _ := os.ReadDir(cfg.HFCache)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".download-") {
				t.Errorf("temporary %s left behind", e.Name())
			}
		}
	}
	bad := DefaultConfig()
	bad.HubURL = "ftp://x"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "HubURL") || !strings.Contains(err.Error(), "HFCache") {
		t.Errorf("Validate() = %v, want HubURL and HFCache problems", err)
	}
}
