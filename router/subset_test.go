package router

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestSubsetForms: a bare IP allows every port on it, ip:port exactly that
// endpoint; entries may be comma-separated; what names no endpoint is
// ignored; a hint with nothing usable allows no pod (503), never a pod
// outside it.
func TestSubsetForms(t *testing.T) {
	tr := newTestRouter(t) // llama on a 10.0.0.1, b .2, c .3 (port 8000)
	for _, tt := range []struct {
		subset []string
		want   string // the pod, or "" for a 503
	}{
		{[]string{"10.0.0.3"}, "c"},
		{[]string{"10.0.0.2:9999, 10.0.0.3:8000"}, "c"},
		{[]string{" 10.0.0.2:8000 "}, "b"},
		{[]string{"nope", "10.0.0.1:8000"}, "a"},
		{[]string{"[::ffff:10.0.0.2]:8000"}, "b"},
		{[]string{"nope"}, ""},
		{[]string{"10.0.0.4"}, ""}, // qwen's pod: not llama's
	} {
		d, err := tr.route("/v1/completions", completion("llama", "x", ""), tt.subset...)
		switch {
		case tt.want == "" && (AsError(err) == nil || AsError(err).Status != http.StatusServiceUnavailable):
			t.Errorf("subset %q = %v, %v; want 503", tt.subset, d, err)
		case tt.want != "" && (err != nil || d.Pod != tt.want):
			t.Errorf("subset %q = %+v, %v; want pod %s", tt.subset, d, err, tt.want)
		}
		if d != nil {
			d.Done()
		}
	}
}

// FuzzParseSubset: any hint parses without a panic, and every endpoint it
// allows is an IP and a port, in the subset as given.
func FuzzParseSubset(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8000", "10.0.0.1, 10.0.0.2:80", "[fd00::1]:8000", "fd00::1", ":80", "a:b:c", "1.2.3.4:0", "1.2.3.4:65536", "[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hint string) {
		s, ignored := ParseSubset([]string{hint})
		if ignored < 0 || s.Len() < 0 {
			t.Fatalf("ParseSubset(%q) = %v, %d", hint, s, ignored)
		}
		for ep := range s.endpoints {
			host, port, err := net.SplitHostPort(ep)
			if err != nil || net.ParseIP(host) == nil || port == "" || !s.Allows(ep) {
				t.Fatalf("ParseSubset(%q) allows %q, not an ip:port it allows", hint, ep)
			}
			if !strings.Contains(hint, port) {
				t.Fatalf("ParseSubset(%q) made up the port of %q", hint, ep)
			}
		}
		for h := range s.hosts {
			if net.ParseIP(h) == nil {
				t.Fatalf("ParseSubset(%q) allows host %q, not an IP", hint, h)
			}
		}
		_ = s.Allows(hint) // any endpoint string is safe to ask about
	})
}
