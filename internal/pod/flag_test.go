package pod

import (
	"strings"
	"testing"
)

func TestParseFlag(t *testing.T) {
	tests := []struct {
		in      string
		want    Entry
		wantErr string
	}{
		{in: "a=10.0.0.1:8000", want: Entry{Name: "a", Address: "10.0.0.1:8000"}},
		{in: "b=127.0.0.1:8001,model=Qwen/Qwen3-0.6B,events=6000,replay=6001", want: Entry{Name: "b", Address: "127.0.0.1:8001", Model: "Qwen/Qwen3-0.6B", EventPort: 6000, ReplayPort: 6001}},
		{in: "c=[::1]:80", want: Entry{Name: "c", Address: "[::1]:80"}},
		{in: "e=10.0.0.5:80,role=prefill", want: Entry{Name: "e", Address: "10.0.0.5:80", Role: "prefill"}},
		{in: "10.0.0.1:8000", wantErr: "want name=ip:port"},
		{in: "a=host:8000", wantErr: "not ip:port"},
		{in: "a=10.0.0.1:0", wantErr: "not in [1, 65535]"},
		{in: "a=10.0.0.1:80,events=x", wantErr: "not in [1, 65535]"},
		{in: "a=10.0.0.1:80,flavor=red", wantErr: "unknown field"},
		{in: "a=10.0.0.1:80,role=judge", wantErr: "role"},
		{in: "d=10.0.0.4:8000,dp=4", want: Entry{Name: "d", Address: "10.0.0.4:8000", DPSize: 4}},
		{in: "d=10.0.0.4:8000,dp=0", wantErr: "dp \"0\" is not in [1, 1024]"},
		{in: "d=10.0.0.4:8000,dp=x", wantErr: "dp \"x\" is not in [1, 1024]"},
	}
	for _, tt := range tests {
		got, err := ParseFlag(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseFlag(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !equalEntries(got, tt.want) {
			t.Errorf("ParseFlag(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
		}
		if _, errs := got.Pod(""); len(errs) != 0 && got.Model != "" {
			t.Errorf("ParseFlag(%q) = %+v, whose Pod has problems %v", tt.in, got, errs)
		}
	}
}

func equalEntries(a, b Entry) bool {
	return a.Name == b.Name && a.Address == b.Address && a.Model == b.Model && a.EventPort == b.EventPort &&
		a.ReplayPort == b.ReplayPort && a.DPSize == b.DPSize && a.Role == b.Role && len(a.Aliases) == len(b.Aliases) && len(a.LoRAs) == len(b.LoRAs)
}
