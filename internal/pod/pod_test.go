package pod

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		pod  Pod
		want string // "" = valid
	}{
		{Pod{Name: "a", IP: "10.0.0.1"}, ""},
		{Pod{Name: "a", IP: "::1", EventPort: 5557, ReplayPort: 5558, DPSize: 8}, ""},
		{Pod{IP: "10.0.0.1"}, "empty name"},
		{Pod{Name: "a", IP: "pod.local"}, "not an IP"},
		{Pod{Name: "a", IP: "10.0.0.1", EventPort: 65535, DPSize: 2}, "out of range"},
		{Pod{Name: "a", IP: "10.0.0.1", DPSize: -1}, "DP size"},
	}
	for _, tc := range tests {
		err := tc.pod.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Validate() = %v, want %q", tc.pod, err, tc.want)
		}
	}
}

func TestEqualAndEndpoint(t *testing.T) {
	a := Pod{Name: "a", IP: "::1", Port: 8000, Aliases: []string{"x"}}
	if got, want := a.Endpoint(), "[::1]:8000"; got != want {
		t.Errorf("Endpoint() = %q, want %q", got, want)
	}
	same, b := a, a
	b.Aliases = []string{"y"}
	if !a.Equal(same) || a.Equal(b) {
		t.Errorf("Equal: a.Equal(a copy) = %v, a.Equal(b) = %v, want true, false", a.Equal(same), a.Equal(b))
	}
}
