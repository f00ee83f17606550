package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/hubtest"
)

// hubModel is the name the pods serve Qwen3 under, the hub repository of
// the same name.
const hubModel = "Qwen/Qwen3-0.6B"

// TestE2EHubDownload: the real kvrouter binary, given only the pods (and
// their model's name), a hub endpoint and a token file, downloads the
// model's tokenizer from the local test hub. Killed while the download is
// half done (requests routed by load meanwhile), it leaves no snapshot;
// restarted, it downloads again, then tokenizes exactly: the prompt routed
// during the download is found whole, its block count the Rust-exact one,
// on the pod that stored it.
func TestE2EHubDownload(t *testing.T) {
	dir := qwen3Dir(t)
	hub, tokenFile := qwen3Hub(t)
	cache := t.TempDir()
	bin := buildKVRouter(t)
	f := startFleetWith(t, fleetOptions{pods: 2, model: hubModel})
	args := []string{"--hf-cache", cache, "--hub-endpoint", hub.URL, "--hub-token-file", tokenFile, "--hub-offline=false"}
	for name, sim := range f.sims {
		args = append(args, "--pod", fmt.Sprintf("%s=%s,model=%s,events=%d,replay=%d", name, f.pods[name], hubModel,
			port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint())))
	}
	text := strings.Repeat("Background on tides that every follow-up repeats verbatim. ", 10) + "Why are there two a day?"
	body := fmt.Sprintf(`{"model":%q,"prompt":%q}`, hubModel, text)

	// Killed midway: routed by load meanwhile, and no snapshot left.
	waiting := hub.Hold()
	first := startKVRouter(t, bin, args...)
	select {
	case <-waiting:
	case <-time.After(30 * time.Second): // a hang guard, not a performance bound
		t.Fatal("kvrouter never asked the hub for the tokenizer")
	}
	if !poll(func() bool { return first.ready(t) }) {
		t.Fatal("kvrouter never became ready")
	}
	h, err := route(t.Context(), first.envoy, body)
	if err != nil {
		t.Fatal(err)
	}
	if h["x-kvrouter-reason"] != "tokenizer-pending" {
		t.Errorf("reason during the download = %q, want tokenizer-pending", h["x-kvrouter-reason"])
	}
	pod := h["x-kvrouter-pod"] // it caches the prompt
	if why := first.readyz(t); !strings.Contains(why, hubModel+" tokenizer (tokenizer-pending)") {
		t.Errorf("/readyz during the download = %q, want it to name the model's pending tokenizer", why)
	}
	first.kill()
	hub.Release()
	repo := filepath.Join(cache, "models--Qwen--Qwen3-0.6B")
	if snaps, _ := os.ReadDir(filepath.Join(repo, "snapshots")); len(snaps) != 0 {
		t.Fatalf("a killed download left snapshots %v", snaps)
	}

	// Restarted: downloads, then routes exactly: the prompt's blocks, as
	// many as the Rust-exact ids fill, are found on the pod that served it.
	second := startKVRouter(t, bin, args...)
	if !poll(func() bool { return second.tokenization(t) == "exact" }) {
		t.Fatalf("tokenization after the restart = %q, want exact", second.tokenization(t))
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	blocks := len(ids) / blockhash.DefaultBlockSize
	want := fmt.Sprintf("%d/%d", blocks, blocks)
	// Asked without routing until the model's tokenizer is in use and the
	// pod's replay has reached the new process: a request routed before
	// either would go by load, and the pod serving it would hold the
	// prompt too.
	if !poll(func() bool {
		reason, matched := second.score(t, body)
		return reason == "load" && matched[pod] == blocks
	}) {
		reason, matched := second.score(t, body)
		t.Fatalf("the restarted router scores the prompt %q, matched blocks %v; want load, %d on %s", reason, matched, blocks, pod)
	}
	if !poll(func() bool {
		h, err = route(t.Context(), second.envoy, body)
		return err == nil && h["x-kvrouter-reason"] == "prefix" && h["x-kvrouter-cached-blocks"] == want
	}) {
		t.Fatalf("after the restart = %v, %v, want prefix %s on %s", h, err, want, pod)
	}
	if h["x-kvrouter-pod"] != pod {
		t.Errorf("after the restart the prompt went to %s, want %s, which stored it", h["x-kvrouter-pod"], pod)
	}
	snapshot := filepath.Join(repo, "snapshots", hubtest.Commit)
	if _, err := os.Stat(filepath.Join(snapshot, "tokenizer.json")); err != nil {
		t.Errorf("the download is not in the cache layout: %v", err)
	}
	if ref, _ := os.ReadFile(filepath.Join(repo, "refs", "main")); string(ref) != hubtest.Commit {
		t.Errorf("refs/main = %q, want %s", ref, hubtest.Commit)
	}
}

// qwen3Hub is a local test hub serving Qwen3's tokenizer as hubModel to
// the token "hub-secret", and a file holding that token.
func qwen3Hub(t *testing.T) (*hubtest.Hub, string) {
	t.Helper()
	dir := qwen3Dir(t)
	files := map[string][]byte{}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("hub-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return hubtest.New(t, "hub-secret", map[string]map[string][]byte{hubModel: files}), tokenFile
}

// score returns what POST /v1/score says of body: the decision's reason
// and each candidate's matched blocks. It routes nothing.
func (p *kvrouterProcess) score(t *testing.T, body string) (reason string, matched map[string]int) {
	t.Helper()
	resp := p.adminDo(t, http.MethodPost, "/v1/score", strings.NewReader(body))
	defer func() { _ = resp.Body.Close() }()
	var rep struct {
		Reason string `json:"reason"`
		Pods   []struct {
			Name    string `json:"name"`
			Matched int    `json:"matched_blocks"`
		} `json:"pods"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	matched = map[string]int{}
	for _, pod := range rep.Pods {
		matched[pod.Name] = pod.Matched
	}
	return rep.Reason, matched
}

// readyz returns /readyz's line.
func (p *kvrouterProcess) readyz(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// tokenization returns /debug/pods' tokenization of the pods when they
// agree ("" before any pod is known, "mixed" when they differ).
func (p *kvrouterProcess) tokenization(t *testing.T) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+p.admin+"/debug/pods", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var pods []struct {
		Tokenization string `json:"tokenization"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pods); err != nil {
		t.Fatal(err)
	}
	got := ""
	for i, pod := range pods {
		if i > 0 && pod.Tokenization != got {
			return "mixed"
		}
		got = pod.Tokenization
	}
	return got
}
