package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/conf"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantErr    error // nil, errUsage or conf.ErrConfig
		wantStdout string
		wantStderr string
	}{
		{name: "version", args: []string{"version"}, wantStdout: "kvrouter dev ("},
		{name: "--version", args: []string{"--version"}, wantStdout: "kvrouter dev ("},
		{name: "no command: help on stdout", args: nil, wantStdout: "Available Commands:"},
		{name: "help", args: []string{"help"}, wantStdout: "Available Commands:"},
		{name: "-h on stdout", args: []string{"-h"}, wantStdout: "Available Commands:"},
		{name: "help serve", args: []string{"help", "serve"}, wantStdout: "--admin-addr"},
		{name: "serve -h", args: []string{"serve", "-h"}, wantStdout: "--admin-addr"},
		{name: "version -h names its flags", args: []string{"version", "-h"}, wantStdout: "Flags:\n  -h, --help"},
		{name: "completion", args: []string{"completion", "bash"}, wantStdout: "bash completion"},
		{name: "unknown command", args: []string{"nonsense"}, wantErr: errUsage, wantStderr: "kvrouter: unknown command \"nonsense\" for \"kvrouter\"\nSee 'kvrouter --help' for usage.\n"},
		{name: "misspelled command", args: []string{"sevre"}, wantErr: errUsage, wantStderr: "Did you mean this?\n\tserve"},
		{name: "unknown global flag", args: []string{"--bogus", "version"}, wantErr: errUsage, wantStderr: "kvrouter: unknown flag: --bogus\n"},
		{name: "bad serve flag", args: []string{"serve", "--nope"}, wantErr: errUsage, wantStderr: "kvrouter: unknown flag: --nope\nSee 'kvrouter serve --help' for usage.\n"},
		{name: "bad log level", args: []string{"serve", "--log-level", "loud"}, wantErr: conf.ErrConfig, wantStderr: ""},
		// The Endpoint Picker charts set the container's arguments only: a
		// first argument that is a flag runs serve (its problem is serve's).
		{name: "the picker's arguments run serve", args: []string{"--pool-name", "qwen", "--kubeconfig", "off", "--zap-encoder", "json", "--v", "1"}, wantErr: conf.ErrConfig, wantStderr: ""},
		{name: "-v alone is the version", args: []string{"-v"}, wantStdout: "kvrouter dev ("},
		{name: "stray argument", args: []string{"version", "extra"}, wantErr: errUsage, wantStderr: "kvrouter: unexpected argument \"extra\"\nSee 'kvrouter version --help' for usage.\n"},
		{name: "tokenize needs a tokenizer", args: []string{"tokenize"}, wantErr: errUsage, wantStderr: `required flag(s) "tokenizer" not set`},
		{name: "render needs a tokenizer", args: []string{"render"}, wantErr: errUsage, wantStderr: `required flag(s) "tokenizer" not set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("run(%q) = %v, want %v (stderr %q)", tt.args, err, tt.wantErr, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("run(%q) stdout = %q, want it to contain %q", tt.args, stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("run(%q) stderr = %q, want it to contain %q", tt.args, stderr.String(), tt.wantStderr)
			}
			if strings.Contains(stderr.String(), "Usage:") {
				t.Errorf("run(%q) stderr = %q, want no usage dumped there", tt.args, stderr.String())
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errUsage, 2},
		{errors.Join(errUsage, errors.New("bad flag")), 2},
		{errors.New("boom"), 1},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
