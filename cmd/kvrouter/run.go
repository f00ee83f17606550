package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errUsage marks a command-line mistake, already reported with a hint at
// --help; the process exits with status 2.
var errUsage = errors.New("usage error")

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// streams are a command's standard input and outputs.
type streams struct {
	in          io.Reader
	out, errOut io.Writer
}

// run is the whole program behind main, testable: it parses args, runs one
// command and returns its error. Help goes to stdout. A command-line mistake
// is reported on stderr with a hint at --help, never the whole usage, and
// returns an error wrapping errUsage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, streams{os.Stdin, stdout, stderr})
}

func runWith(ctx context.Context, args []string, s streams) error {
	root := newRootCommand(s)
	root.SetArgs(pickerArgs(args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var failed runFailed
	if errors.As(err, &failed) {
		return failed.err
	}
	path := "kvrouter"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(s.errOut, "kvrouter: %s\nSee '%s --help' for usage.\n", flagError(err), path)
	return fmt.Errorf("%w: %w", errUsage, err)
}

// pickerArgs runs serve when the first argument is a flag (but for the
// root's own --help and --version): the charts that deploy an Endpoint
// Picker set its container's arguments only, so kvrouter's image, put in
// the picker's place, runs `kvrouter --pool-name R ...`. A flag followed by
// a lone true or false is given that value.
func pickerArgs(args []string) []string {
	if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		return args
	}
	switch args[0] {
	case "-h", "--help", "--version":
		return args
	case "-v":
		if len(args) == 1 {
			return args // the version; the picker's -v takes a level
		}
	}
	// GIE's chart renders each entry of its flags map as two arguments,
	// `--secure-serving` `false`, which would read as the bare switch (true)
	// and a stray argument: they are joined, as the entry meant.
	out := []string{"serve"}
	for i := 0; i < len(args); i++ {
		if next := i + 1; next < len(args) && strings.HasPrefix(args[i], "--") && !strings.Contains(args[i], "=") &&
			(args[next] == "true" || args[next] == "false") {
			out = append(out, args[i]+"="+args[next])
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// runFailed wraps what a command's run returned, to tell it apart from
// cobra's own command-line errors.
type runFailed struct{ err error }

func (r runFailed) Error() string { return r.err.Error() }

// runE adapts a command's run to cobra: its error is the command's, not a
// command-line mistake.
func runE(fn func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		err := fn(cmd)
		var u badUsage
		switch {
		case err == nil:
			return nil
		case errors.As(err, &u):
			return u.error
		}
		return runFailed{err}
	}
}

// badUsage is a command's complaint about how it was called, reported as
// cobra's own: with a hint at --help and exit status 2.
type badUsage struct{ error }

// checkDir says, for a flag naming a directory, that it is missing or not
// a directory, in those words.
func checkDir(flag, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &dirError{flag, dir, "no such directory", err}
	case err != nil:
		return &dirError{flag, dir, err.Error(), err}
	case !fi.IsDir():
		return &dirError{flag, dir, "not a directory", nil}
	}
	return nil
}

type dirError struct {
	flag, dir, what string
	err             error
}

func (e *dirError) Error() string { return fmt.Sprintf("--%s %s: %s", e.flag, e.dir, e.what) }
func (e *dirError) Unwrap() error { return e.err }

// noArgs refuses positional arguments: every command reads flags and stdin.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q", args[0])
	}
	return nil
}

func newRootCommand(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "kvrouter",
		Short: "A KV-cache-aware router for fleets of vLLM pods",
		Long: `kvrouter sends every OpenAI-style request to the vLLM pod that already caches
the longest prefix of its prompt, weighed against load. Envoy calls it as an
ext_proc external processor (or it proxies requests itself); it follows each
pod's KV-cache events and finds pods in Kubernetes or in a pods file.`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// Runnable, so that a word that is no command is refused (with
		// cobra's suggestions) rather than answered with help.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.errOut)
	root.SetVersionTemplate("kvrouter {{.Version}}\n")
	// The root runs only to refuse a word that is no command: its usage
	// shows the commands, not a bare "kvrouter [flags]".
	if t := root.UsageTemplate(); strings.Contains(t, "{{if .Runnable}}") {
		root.SetUsageTemplate(strings.Replace(t, "{{if .Runnable}}", "{{if and .Runnable .HasParent}}", 1))
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(newServeCommand(s), newHashCommand(s), newTokenizeCommand(s), newRenderCommand(s), newVersionCommand(s))
	return root
}

func newVersionCommand(s streams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  noArgs,
		RunE: runE(func(*cobra.Command) error {
			_, err := fmt.Fprintf(s.out, "kvrouter %s\n", versionString())
			return err
		}),
	}
}

// versionString is the version, the Go release and the source revision.
func versionString() string {
	return fmt.Sprintf("%s (%s%s)", version, runtime.Version(), vcsRevision())
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

// badFlagValue is pflag's complaint about a value its flag cannot hold.
var badFlagValue = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?(--[\w-]+)" flag: (.*)$`)

// flagError says a command-line error in the words of this command line: a
// value a flag cannot hold names the flag and what it wants, not the Go
// function that refused it.
func flagError(err error) string {
	m := badFlagValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	return fmt.Sprintf("%s: %q, want %s", m[2], m[1], wantOf(m[3]))
}

// wantOf turns a parse error of a flag value into what the flag wants.
func wantOf(parseErr string) string {
	switch {
	case strings.Contains(parseErr, "ParseInt"), strings.Contains(parseErr, "ParseUint"):
		return "an integer"
	case strings.Contains(parseErr, "ParseFloat"):
		return "a number"
	case strings.Contains(parseErr, "ParseBool"):
		return "true or false"
	case strings.Contains(parseErr, "time: "):
		return `a duration such as "1.5s" or "2m"`
	}
	return "a valid value: " + parseErr
}

// lenientFlags makes every flag of fs record a value it cannot hold in bad
// instead of stopping the parse, so `kvrouter serve` reports every problem
// of its command line and config file at once, in one format.
func lenientFlags(fs *pflag.FlagSet, bad *[]string) {
	fs.VisitAll(func(f *pflag.Flag) {
		if _, list := f.Value.(pflag.SliceValue); !list { // a list takes any string
			f.Value = &lenientValue{Value: f.Value, name: f.Name, bad: bad}
		}
	})
}

type lenientValue struct {
	pflag.Value
	name string
	bad  *[]string
}

func (v *lenientValue) Set(s string) error {
	old := v.String()
	if err := v.Value.Set(s); err != nil {
		_ = v.Value.Set(old) // pflag's numbers keep what they half-parsed
		*v.bad = append(*v.bad, fmt.Sprintf("--%s: %q, want %s", v.name, s, wantOf(err.Error())))
	}
	return nil
}
