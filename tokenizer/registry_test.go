package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// tinyFile returns a small byte-level tokenizer.json: byte b is id b, "he"
// is 256.
func tinyFile() map[string]any {
	vocab := map[string]any{"he": 256}
	next := 256
	for b := range 256 {
		r := rune(b)
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE
		if !printable {
			r = rune(next)
			next++
		}
		vocab[string(r)] = b
	}
	return map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "use_regex": false},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{"h e"}},
	}
}

// writeTiny writes tinyFile into dir.
func writeTiny(t *testing.T, dir string) {
	t.Helper()
	data, err := json.Marshal(tinyFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRegistry(t *testing.T) {
	root := t.TempDir()
	writeTiny(t, filepath.Join(root, "a"))
	writeTiny(t, filepath.Join(root, "b"))
	cache := filepath.Join(root, "hub")
	writeTiny(t, filepath.Join(cache, "models--Org--Ref", "snapshots", "abc"))
	writeTiny(t, filepath.Join(cache, "models--Org--Ref", "snapshots", "def"))
	must(t, os.MkdirAll(filepath.Join(cache, "models--Org--Ref", "refs"), 0o755))
	must(t, os.WriteFile(filepath.Join(cache, "models--Org--Ref", "refs", "main"), []byte("def\n"), 0o600))
	writeTiny(t, filepath.Join(cache, "models--Org--Only", "snapshots", "123"))
	writeTiny(t, filepath.Join(cache, "models--Org--Two", "snapshots", "1"))
	writeTiny(t, filepath.Join(cache, "models--Org--Two", "snapshots", "2"))

	cfg := DefaultConfig()
	cfg.Models = map[string]string{"a": filepath.Join(root, "a"), "b": filepath.Join(root, "b")}
	cfg.HFCache = cache
	cfg.Aliases = map[string]string{"served-a": "a", "lora-x": "served-a"}
	cfg.MaxLoaded = 2
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.For("a")
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := a.Encode("hex", false); len(ids) != 2 || ids[0] != 256 {
		t.Errorf("a.Encode(hex) = %v, want [256 120]", ids)
	}
	for _, name := range []string{"a", "served-a", "lora-x"} {
		if got, err := r.For(name); err != nil || got != a {
			t.Errorf("For(%q) = %p, %v, want the tokenizer of a (%p)", name, got, err, a)
		}
	}
	for _, name := range []string{"Org/Ref", "Org/Only"} {
		if _, err := r.For(name); err != nil {
			t.Errorf("For(%q): %v", name, err)
		}
	}
	if dir, _ := r.Dir("Org/Ref"); !strings.HasSuffix(dir, filepath.Join("snapshots", "def")) {
		t.Errorf("Dir(Org/Ref) = %q, want the refs/main snapshot", dir)
	}
	if _, err := r.For("Org/Two"); err == nil || errors.Is(err, ErrUnknownModel) {
		t.Errorf("For(Org/Two) = %v, want an ambiguity error", err)
	}
	for _, name := range []string{"nope", "Org/Missing", "../a", ""} {
		if _, err := r.For(name); !errors.Is(err, ErrUnknownModel) {
			t.Errorf("For(%q) = %v, want ErrUnknownModel", name, err)
		}
	}
	// a was evicted by the two cache loads (MaxLoaded 2): a new load.
	if again, err := r.For("a"); err != nil || again == a {
		t.Errorf("For(a) after eviction = %p, %v, want a fresh tokenizer", again, err)
	}
}

func TestRegistryLoadsOnce(t *testing.T) {
	dir := t.TempDir()
	writeTiny(t, dir)
	cfg := DefaultConfig()
	cfg.Models = map[string]string{"m": dir}
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]*Tokenizer, 8)
	for i := range got {
		wg.Go(func() {
			tok, err := r.For("m")
			if err != nil {
				t.Error(err)
			}
			got[i] = tok
		})
	}
	wg.Wait()
	for _, tok := range got {
		if tok != got[0] {
			t.Fatalf("concurrent For(m) returned different tokenizers")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{
		MaxLoaded: 0,
		Models:    map[string]string{"x": ""},
		Aliases:   map[string]string{"p": "q", "q": "p"},
	}
	err := cfg.Validate()
	for _, want := range []string{"MaxLoaded", `model "x"`, "cycle"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}
