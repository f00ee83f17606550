package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestMain_(t *testing.T) {
	var stderr bytes.Buffer
	args := []string{"-endpoint", "tcp://127.0.0.1:*", "-replay-endpoint", "tcp://127.0.0.1:*", "-count", "3", "-rate", "0", "-blocks", "2"}
	if err := Main(context.Background(), args, &stderr); err != nil {
		t.Fatalf("Main(%q) = %v; stderr:\n%s", args, err, &stderr)
	}
	if !strings.Contains(stderr.String(), "publishing on tcp://127.0.0.1:") {
		t.Errorf("stderr = %q, want the bound endpoints", &stderr)
	}
	if err := Main(context.Background(), []string{"-algo", "md5"}, &stderr); err == nil {
		t.Error("Main(-algo md5) succeeded, want an error")
	}
}
