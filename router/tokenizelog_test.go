package router

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestTokenizeLog(t *testing.T) {
	var buf bytes.Buffer
	l := newTokenizeLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	t0 := time.Unix(1000, 0)
	boom := errors.New("chat template: no boom here")
	for i := range 3 {
		l.log(t0.Add(time.Duration(i)*time.Second), "m", boom)
	}
	l.log(t0, "other", boom)
	if n := strings.Count(buf.String(), "prompt not tokenized"); n != 2 {
		t.Fatalf("%d lines for 3 errors of m and 1 of other within a minute, want 2:\n%s", n, buf.String())
	}
	buf.Reset()
	l.log(t0.Add(tokenizeErrorEvery+time.Second), "m", boom)
	if !strings.Contains(buf.String(), `"errors_not_logged":2`) || !strings.Contains(buf.String(), `"model":"m"`) {
		t.Errorf("the line a minute later = %q, want m's with the 2 errors left out", buf.String())
	}
}
