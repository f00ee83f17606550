package main

import (
	"fmt"
	"slices"
	"strings"
)

// The workloads, by the names -workloads takes; a scenario's group is one
// of them, and so is the report section it lands in.
const (
	conversation         = "conversation"           // the Mooncake traces, arrivals compressed 1×, 2× and 3×
	sharedPrefix         = "shared-prefix"          // llm-d's published shared-prefix run at half scale
	sharedPrefixOverload = "shared-prefix-overload" // the same with a working set past the fleet's KV, and its sweep
	prefillDecode        = "prefill-decode"         // prefill/decode disaggregation against aggregated serving
	cacheOverload        = "cache-overload"         // llm-d's cache-overload runs
	heterogeneousSpeeds  = "heterogeneous-speeds"   // half the pods at half speed: learned prefill speeds
)

// workloadNames are every workload, in the order they run.
var workloadNames = []string{conversation, sharedPrefix, sharedPrefixOverload, prefillDecode, cacheOverload, heterogeneousSpeeds}

// parseWorkloads reads -workloads: workload names separated by commas. It
// refuses an empty list and names every unknown workload at once.
func parseWorkloads(s string) ([]string, error) {
	var out, unknown []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case !slices.Contains(workloadNames, f):
			unknown = append(unknown, fmt.Sprintf("%q", f))
		case !slices.Contains(out, f):
			out = append(out, f)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("-workloads %q: unknown workload %s; want names from %s, separated by commas",
			s, strings.Join(unknown, ", "), strings.Join(workloadNames, ", "))
	}
	return out, nil
}

// runs reports whether -workloads asks for the workload name.
func (o options) runs(name string) bool {
	return slices.Contains(strings.Split(o.workloads, ","), name)
}
