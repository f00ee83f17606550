// Package pyoracle runs the jinja2 oracle script (tokenizer/jinja/testdata/
// jinja2_oracle.py) under Debian's /usr/bin/python3 for differential tests:
// one process per test binary, requests and results as JSON lines. [Start]
// runs any other oracle process that speaks the same protocol.
package pyoracle

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Python is the interpreter with Debian's python3-jinja2.
const Python = "/usr/bin/python3"

// Result is one oracle answer: the rendered text, or the error jinja2
// raised ("Class: message").
type Result struct {
	Out   *string `json:"out"`
	Error string  `json:"error"`
}

// Oracle is a running oracle process.
type Oracle struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

var (
	once    sync.Once
	shared  *Oracle
	initErr error
)

// Script is the path of the oracle script.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "jinja", "testdata", "jinja2_oracle.py")
}

// Get returns the shared oracle, starting it on first use. Without
// python3-jinja2 the test is skipped locally and fails under CI=true.
func Get(t testing.TB) *Oracle {
	t.Helper()
	once.Do(func() { shared, initErr = start() })
	if initErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("jinja2 oracle unavailable under CI: %v", initErr)
		}
		t.Skipf("jinja2 oracle unavailable (run `make deps`): %v", initErr)
	}
	return shared
}

func start() (*Oracle, error) {
	if err := exec.Command(Python, "-c", "import jinja2").Run(); err != nil {
		return nil, fmt.Errorf("%s cannot import jinja2: %w", Python, err)
	}
	return Start(exec.Command(Python, Script()))
}

// Start runs cmd as an oracle: any process that answers each JSON request
// line on its stdin with one {"out"} or {"error"} line on its stdout, in
// order (the @huggingface/jinja oracle speaks the same protocol).
func Start(cmd *exec.Cmd) (*Oracle, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &Oracle{in: in, out: bufio.NewReaderSize(out, 1<<20)}, nil
}

// Query sends every request and returns the answers in order.
func (o *Oracle) Query(reqs []any) ([]Result, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(o.in)
		enc := json.NewEncoder(w)
		for _, r := range reqs {
			if err := enc.Encode(r); err != nil {
				errc <- err
				return
			}
		}
		errc <- w.Flush()
	}()
	res := make([]Result, len(reqs))
	for i := range res {
		line, err := o.out.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("oracle answer %d: %w", i, err)
		}
		if err := json.Unmarshal(line, &res[i]); err != nil {
			return nil, fmt.Errorf("oracle answer %d: %w", i, err)
		}
	}
	return res, <-errc
}

// Diff describes the first difference of got and want: its byte offset and
// both sides around it; "" when equal.
func Diff(got, want string) string {
	if got == want {
		return ""
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	ctx := func(s string) string {
		return fmt.Sprintf("%q", s[min(lo, len(s)):min(i+40, len(s))])
	}
	return fmt.Sprintf("first difference at byte %d (of %d vs %d):\n  got  %s\n  want %s", i, len(got), len(want), ctx(got), ctx(want))
}

// Check compares a Go render (out, err) with an oracle result: equal bytes,
// or both failed. It returns "" when they agree.
func Check(out string, err error, r Result) string {
	switch {
	case r.Out == nil && err != nil:
		return ""
	case r.Out == nil:
		return fmt.Sprintf("jinja2 raised %s, Go rendered %q", r.Error, trunc(out))
	case err != nil:
		return fmt.Sprintf("Go failed: %v; jinja2 rendered %q", err, trunc(*r.Out))
	}
	return Diff(out, *r.Out)
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return strings.Clone(s)
}
