package redisindex

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisDownWarnsOnce: a path to Redis that answers pings but fails
// larger round trips (found by the wire fault tests: a Redis behind a
// 1 KB/s link, or one that closes after 5,000 bytes) marks Redis down
// every ping interval; that is one WARN a minute, the next saying how many
// times it went down meanwhile, not a WARN a second.
func TestRedisDownWarnsOnce(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	x := &Index{log: slog.New(slog.NewTextHandler(&logs, nil)), now: func() time.Time { return now }}
	for range 90 { // 90 s of flapping, a fall a second
		x.warnDown("lease", errors.New("EOF"))
		now = now.Add(time.Second)
	}
	warns := strings.Count(logs.String(), "level=WARN")
	if warns != 2 {
		t.Fatalf("%d WARN lines for 90 falls in 90 s, want 2 (one a minute):\n%s", warns, logs.String())
	}
	if !strings.Contains(logs.String(), "down_again_since_last_warning=59") {
		t.Errorf("the second WARN does not count the 59 falls since the first:\n%s", logs.String())
	}
}
