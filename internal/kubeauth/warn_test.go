package kubeauth

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestReviewFailuresWarnOnce: while the API server does not answer (the
// wire fault tests: its connection stalled or reset), every admin request
// on a path not cached fails its review; that is one WARN a minute, the
// next saying how many failed meanwhile, not a WARN a request.
func TestReviewFailuresWarnOnce(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection reset by peer")
	})
	var logs bytes.Buffer
	a, err := New(cs, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return now }
	for i := range 90 { // a request a second for 90 s
		req := httptest.NewRequest("GET", fmt.Sprintf("/debug/pprof/p%d", i), nil)
		req.Header.Set("Authorization", "Bearer a-token")
		if got := a.Check(req); got != Failed {
			t.Fatalf("check %d = %q, want %q", i, got, Failed)
		}
		now = now.Add(time.Second)
	}
	if warns := strings.Count(logs.String(), "level=WARN"); warns != 2 {
		t.Fatalf("%d WARN lines for 90 failed reviews in 90 s, want 2:\n%s", warns, logs.String())
	}
	if !strings.Contains(logs.String(), "failed_since_last_warning=59") {
		t.Errorf("the second WARN does not count the 59 failures since the first:\n%s", logs.String())
	}
}
