package main

import (
	"strings"
	"testing"
)

func TestParseStaticPod(t *testing.T) {
	tests := []struct {
		in      string
		want    staticPod
		wantErr string
	}{
		{in: "a=10.0.0.1:8000", want: staticPod{name: "a", ip: "10.0.0.1", port: 8000}},
		{in: "b=127.0.0.1:8001,model=Qwen/Qwen3-0.6B,events=6000,replay=6001", want: staticPod{name: "b", ip: "127.0.0.1", port: 8001, model: "Qwen/Qwen3-0.6B", events: 6000, replay: 6001}},
		{in: "c=[::1]:80", want: staticPod{name: "c", ip: "::1", port: 80}},
		{in: "10.0.0.1:8000", wantErr: "want name=ip:port"},
		{in: "a=host:8000", wantErr: "not ip:port"},
		{in: "a=10.0.0.1:0", wantErr: "not in [1, 65535]"},
		{in: "a=10.0.0.1:80,events=x", wantErr: "not in [1, 65535]"},
		{in: "a=10.0.0.1:80,flavor=red", wantErr: "unknown field"},
		{in: "d=10.0.0.4:8000,dp=4", want: staticPod{name: "d", ip: "10.0.0.4", port: 8000, dp: 4}},
		{in: "d=10.0.0.4:8000,dp=0", wantErr: "dp \"0\" is not in [1, 1024]"},
		{in: "d=10.0.0.4:8000,dp=x", wantErr: "dp \"x\" is not in [1, 1024]"},
	}
	for _, tt := range tests {
		got, err := parseStaticPod(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseStaticPod(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseStaticPod(%q) = %+v, %v, want %+v", tt.in, got, err, tt.want)
		}
	}
}
