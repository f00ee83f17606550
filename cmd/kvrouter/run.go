package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// errUsage marks a command-line mistake whose usage text was already printed;
// the process exits with status 2.
var errUsage = errors.New("usage error")

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one kvrouter subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the router: ext_proc server, admin server, event subscribers", runServe},
		{"hash", "print vLLM block hashes of a JSON token-id array read on stdin", runHash},
		{"tokenize", "print the token ids of text read on stdin", runTokenize},
		{"render", "render an OpenAI chat request read on stdin with the model's chat template", runRender},
		{"version", "print the version", runVersion},
	}
}

// run is the whole program behind main, testable: it parses args, runs one
// subcommand and returns its error. A command-line mistake prints usage to
// stderr and returns an error wrapping errUsage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(stderr) }
	if err := fs.Parse(args); err != nil {
		return helpIsSuccess(parseError(err))
	}
	if fs.NArg() == 0 {
		printUsage(stderr)
		return errUsage
	}
	name := fs.Arg(0)
	for _, c := range commands() {
		if c.name == name {
			return helpIsSuccess(c.run(ctx, fs.Args()[1:], stdout, stderr))
		}
	}
	fmt.Fprintf(stderr, "kvrouter: unknown command %q\n\n", name)
	printUsage(stderr)
	return errUsage
}

// parseError maps a flag parsing error: -h stays flag.ErrHelp (the caller
// must stop; run turns it into success), anything else becomes a usage error
// (the flag package already printed it).
func parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %w", errUsage, err)
}

// helpIsSuccess turns a request for help, already answered, into success.
func helpIsSuccess(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func printUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: kvrouter <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'kvrouter <command> -h' for the flags of a command.\n")
	_, _ = io.WriteString(w, b.String())
}

// newFlagSet returns a subcommand's flag set writing its errors and usage to
// stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kvrouter "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: kvrouter %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseNoArgs parses a subcommand's flags and refuses positional arguments.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stderr)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "kvrouter %s (%s%s)\n", version, runtime.Version(), vcsRevision())
	return err
}

// vcsRevision returns ", rev <hash>[+dirty]" from the build info, or "".
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return ", rev " + rev + dirty
}
