package kvevents

import (
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/pod"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	off := DefaultConfig()
	off.Hash, off.VerifyWindow = blockhash.Config{}, 0 // verification off: its settings do not matter
	if err := off.Validate(); err != nil {
		t.Errorf("Validate() without verification = %v", err)
	}
	bad := Config{
		EventPort: 70000, ReplayPort: -1, BackoffMin: time.Second, BackoffMax: time.Millisecond,
		HeartbeatInterval: -1, Hash: blockhash.Config{Algorithm: "md5"}, VerifyMinFailures: 9,
	}
	err := bad.Validate()
	for _, want := range []string{
		"event port", "replay port", "queue size", "max message size", "replay timeout",
		"poll interval", "backoff max", "heartbeat", "md5", "verify window", "verify sample", "verify min failures",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestManagerRejects(t *testing.T) {
	m, err := NewManager(DefaultConfig(), newRecIndex(t), nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(pod.Pod{Name: "a"}); err == nil {
		t.Error("Ensure(pod without IP) succeeded, want an error")
	}
	if _, err := NewManager(Config{}, newRecIndex(t), nil, testLogger(t)); err == nil {
		t.Error("NewManager(zero Config) succeeded, want an error")
	}
}
