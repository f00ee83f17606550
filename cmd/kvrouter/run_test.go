package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantErr    error // nil or errUsage
		wantStdout string
		wantStderr string
	}{
		{name: "version", args: []string{"version"}, wantStdout: "kvrouter dev ("},
		{name: "no command", args: nil, wantErr: errUsage, wantStderr: "Usage: kvrouter <command>"},
		{name: "unknown command", args: []string{"nonsense"}, wantErr: errUsage, wantStderr: `unknown command "nonsense"`},
		{name: "unknown global flag", args: []string{"-bogus", "version"}, wantErr: errUsage, wantStderr: "flag provided but not defined: -bogus"},
		{name: "help", args: []string{"-h"}, wantStderr: "Commands:"},
		{name: "bad serve flag", args: []string{"serve", "--nope"}, wantErr: errUsage, wantStderr: "Usage: kvrouter serve"},
		{name: "bad log level", args: []string{"serve", "--log-level", "loud"}, wantErr: errUsage, wantStderr: `invalid -log-level "loud"`},
		{name: "stray argument", args: []string{"version", "extra"}, wantErr: errUsage, wantStderr: `unexpected argument "extra"`},
		{name: "serve help", args: []string{"serve", "-h"}, wantStderr: "-admin-addr"},
		{name: "tokenize needs a tokenizer", args: []string{"tokenize"}, wantErr: errUsage, wantStderr: "--tokenizer is required"},
		{name: "render needs a tokenizer", args: []string{"render"}, wantErr: errUsage, wantStderr: "--tokenizer is required"},
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
