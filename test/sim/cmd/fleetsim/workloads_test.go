package main

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseWorkloads(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string // a part of the error; "" for none
	}{
		{strings.Join(workloadNames, ","), workloadNames, ""},
		{"shared-prefix", []string{sharedPrefix}, ""},
		{" prefill-decode , cache-overload,prefill-decode", []string{prefillDecode, cacheOverload}, ""},
		{"shared-prefix-overload,conversation", []string{sharedPrefixOverload, conversation}, ""},
		{"b,c", nil, `unknown workload "b", "c"`},
		{"shared", nil, `unknown workload "shared"`},
		{"conversation,", nil, `unknown workload ""`},
		{"", nil, `unknown workload ""`},
	}
	for _, tt := range tests {
		got, err := parseWorkloads(tt.in)
		if !reflect.DeepEqual(got, tt.want) || (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("parseWorkloads(%q) = %q, %v; want %q, error containing %q", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestUnknownWorkloadRefused: -workloads with a name it does not know
// fails before anything runs, listing the names it takes.
func TestUnknownWorkloadRefused(t *testing.T) {
	err := run(context.Background(), []string{"-workloads", "shared-prefix,f"}, io.Discard)
	if err == nil {
		t.Fatal(`run(-workloads shared-prefix,f) = nil, want it refused`)
	}
	for _, want := range append([]string{`unknown workload "f"`}, workloadNames...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run(-workloads shared-prefix,f) = %v, want it to name %q", err, want)
		}
	}
}

// TestRunsOnlyWhatIsAsked: a workload runs when -workloads names it, and
// a name is not taken for another that contains it.
func TestRunsOnlyWhatIsAsked(t *testing.T) {
	o := options{workloads: sharedPrefixOverload + "," + cacheOverload}
	for _, w := range workloadNames {
		want := w == sharedPrefixOverload || w == cacheOverload
		if got := o.runs(w); got != want {
			t.Errorf("options{workloads: %q}.runs(%q) = %v, want %v", o.workloads, w, got, want)
		}
	}
}
