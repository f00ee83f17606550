// Package hfjinja runs kvrouter's second opinion on chat templates, npm
// @huggingface/jinja, through test/oracle/hfjinja.mjs: one node process per
// test binary, speaking the JSON-lines protocol of package pyoracle.
package hfjinja

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

var (
	once    sync.Once
	shared  *pyoracle.Oracle
	initErr error
)

// Dir is test/oracle, which holds the script and its node_modules.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "oracle")
}

// Get returns the shared oracle, starting it on first use. Without node or
// the installed package the test is skipped locally and fails under CI=true.
func Get(t testing.TB) *pyoracle.Oracle {
	t.Helper()
	once.Do(func() { shared, initErr = start() })
	if initErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("@huggingface/jinja oracle unavailable under CI: %v", initErr)
		}
		t.Skipf("@huggingface/jinja oracle unavailable (run `make deps`): %v", initErr)
	}
	return shared
}

func start() (*pyoracle.Oracle, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, err
	}
	dir := Dir()
	pkg := filepath.Join(dir, "node_modules", "@huggingface", "jinja", "package.json")
	if _, err := os.Stat(pkg); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not installed", pkg)
		}
		return nil, err
	}
	cmd := exec.Command(node, filepath.Join(dir, "hfjinja.mjs"))
	cmd.Dir = dir
	// strftime_now reads the requested clock in UTC with English names.
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C", "LANG=C")
	return pyoracle.Start(cmd)
}
