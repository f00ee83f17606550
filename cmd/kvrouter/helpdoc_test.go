package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md and the README's commands section from the real help")

const (
	cliDoc        = "../../docs/cli.md"
	readme        = "../../README.md"
	commandsBegin = "<!-- commands: generated from `kvrouter --help` by `go test ./cmd/kvrouter -run TestHelpDocs -update` -->\n"
	commandsEnd   = "<!-- end of commands -->\n"
)

// helpOf runs kvrouter with args and returns what it printed: help, on
// stdout, with status 0 and nothing on stderr.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), args, &stdout, &stderr); err != nil || stderr.Len() > 0 {
		t.Fatalf("kvrouter %s = %v, stderr %q; want help on stdout only", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestHelpDocs: docs/cli.md is every command's help as kvrouter prints it,
// and the README's commands section is `kvrouter --help`. Run with -update
// after changing a command or a flag.
func TestHelpDocs(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("# kvrouter's command line\n\n" +
		"Every command's `--help`, as kvrouter prints it (generated: `go test ./cmd/kvrouter -run TestHelpDocs -update`).\n" +
		"`kvrouter serve` also reads a config file: [config/kvrouter.example.yaml](../config/kvrouter.example.yaml)\n" +
		"shows every field with its default and its flag.\n")
	root := helpOf(t, "--help")
	fmt.Fprintf(&doc, "\n## kvrouter\n\n```text\n%s```\n", root)
	for _, cmd := range []string{"serve", "hash", "tokenize", "render", "version", "completion"} {
		fmt.Fprintf(&doc, "\n## kvrouter %s\n\n```text\n%s```\n", cmd, helpOf(t, cmd, "--help"))
	}
	section := commandsBegin + "```text\n" + root + "```\n" + commandsEnd
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i, j := strings.Index(text, commandsBegin), strings.Index(text, commandsEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no commands section between %q and %q", commandsBegin, commandsEnd)
	}
	newReadme := text[:i] + section + text[j+len(commandsEnd):]
	if *update {
		if err := os.WriteFile(cliDoc, []byte(doc.String()), 0o644); err != nil { //nolint:gosec // a doc in the repository
			t.Fatal(err)
		}
		if err := os.WriteFile(readme, []byte(newReadme), 0o644); err != nil { //nolint:gosec // a doc in the repository
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != doc.String() {
		t.Errorf("%s differs from the real help; run go test ./cmd/kvrouter -run TestHelpDocs -update and review the diff", cliDoc)
	}
	if newReadme != text {
		t.Errorf("README.md's commands section differs from `kvrouter --help`; run go test ./cmd/kvrouter -run TestHelpDocs -update")
	}
}
