package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/conf"
)

// TestAppPodsFileChanged: a pods file that breaks between validate and the
// start of serve fails the start with the problems validate would have
// said, located alike.
func TestAppPodsFileChanged(t *testing.T) {
	path := writeFile(t, "pods.yaml", "pods:\n- {name: a, address: \"127.0.0.1:1\", model: m}\n")
	c, err := loadConfig([]string{"--pods-file", path, "--pod", "flag=127.0.0.1:2,model=m", "--admin-addr", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{
		{"pods:\n- {name: a, address: nowhere, model: m}\n", path + `:2:3: pods[0] (a): address: "nowhere" is not ip:port`},
		{"pods:\n- {name: flag, address: \"127.0.0.1:3\", model: m}\n", path + `: pod "flag" is also a static pod`},
		{"-", "open " + path + ": no such file or directory"},
	} {
		if tt.file == "-" {
			err = os.Remove(path)
		} else {
			err = os.WriteFile(path, []byte(tt.file), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := "config: 1 problem:\n  - --pods-file: " + tt.want
		if _, err := newApp(s, slog.New(slog.DiscardHandler)); err == nil || err.Error() != want || !errors.Is(err, conf.ErrConfig) {
			t.Errorf("newApp with the pods file %q = %v, want %q", tt.file, err, want)
		}
		if _, err := c.validate(""); err == nil || err.Error() != want {
			t.Errorf("validate with the pods file %q = %v, want %q", tt.file, err, want)
		}
	}
}

// TestServePodsFile runs serve with a config file naming a pods file: its
// pods and the --pod pod are in the fleet.
func TestServePodsFile(t *testing.T) {
	pods := writeFile(t, "pods.yaml", "pods:\n- {name: file-a, address: \"127.0.0.1:1\", model: m, event_port: 2, replay_port: 3}\n")
	cfg := writeFile(t, "kvrouter.yaml", fmt.Sprintf("listen: {admin: \"127.0.0.1:0\", grpc: \"127.0.0.1:0\"}\npods: {file: %q}\n", pods))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"serve", "--log-format", "json", "--config", cfg, "--pod", "flag-b=127.0.0.1:4,model=m,events=5,replay=6"}
	go func() { done <- run(ctx, args, io.Discard, pw); _ = pw.Close() }()
	base := listenURL(t, pr)
	var got []map[string]any
	getJSON(t, base+"/debug/pods", &got)
	if len(got) != 2 || got[0]["name"] != "file-a" || got[1]["name"] != "flag-b" {
		t.Errorf("/debug/pods = %v, want file-a and flag-b", got)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "kvrouter_podsfile_pods 2") {
		t.Errorf("/metrics = %d, want kvrouter_podsfile_pods 2 in it", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve = %v", err)
	}
}
