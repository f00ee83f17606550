package extproc

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/router"
)

// TestFallbackListServed: with router.Config.DestinationEndpoints 4 the destination
// (header and envoy.lb metadata) is the pick then three fallbacks; a proxy
// with override_host load balancing finds the pick down, serves on the next,
// and reports it: the decision, its routing headers and its load move there.
// An ORIGINAL_DST cluster cannot take the list: 503, why 1 is the default.
func TestFallbackListServed(t *testing.T) {
	cfg := router.DefaultConfig()
	cfg.DestinationEndpoints = 4
	k := newKeeperWith(t, cfg)
	srv, err := New(DefaultConfig(), k, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, client := serve(t, srv)
	client.OverrideHost = true
	req := envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"llama","prompt":"` + strings.Repeat("ab cd ", 40) + `"}`)}
	first, err := client.Do(context.Background(), req)
	if err != nil || first.Status != 200 {
		t.Fatalf("first request = %+v, %v", first, err)
	}
	list := strings.Split(first.UpstreamHeaders["x-gateway-destination-endpoint"], ",")
	if len(list) != 4 || list[0] != first.Destination || first.Metadata["envoy.lb"]["x-gateway-destination-endpoint"] != strings.Join(list, ",") {
		t.Fatalf("destination %q, metadata %v; want the pick and three fallbacks in both", list, first.Metadata)
	}
	// The same prompt again picks the pod its speculative entries are on:
	// that pod is down now.
	req.Down = []string{first.Destination}
	res, err := client.Do(context.Background(), req)
	if err != nil || res.Status != 200 {
		t.Fatalf("request with the pick down = %+v, %v", res, err)
	}
	k.mu.Lock()
	d := k.kept[len(k.kept)-1]
	k.mu.Unlock()
	if !slices.Equal(res.Tried, []string{first.Destination}) || res.Destination == first.Destination {
		t.Fatalf("tried %v then served %s; want the pick %s tried first", res.Tried, res.Destination, first.Destination)
	}
	if d.Address != res.Destination || res.ClientHeaders["x-kvrouter-pod"] != d.Pod {
		t.Errorf("decision moved to %s (%s), response names %q; want the endpoint that served, %s", d.Address, d.Pod, res.ClientHeaders["x-kvrouter-pod"], res.Destination)
	}
	for _, p := range k.fleet.Pods() {
		if n := k.fleet.Load(p.Name).InFlight.Load(); n != 0 {
			t.Errorf("pod %s in-flight after both requests = %d, want 0", p.Name, n)
		}
	}
	client.OverrideHost = false
	req.Down = nil
	if res, err := client.Do(context.Background(), req); err != nil || res.Status != 503 {
		t.Errorf("a list through an ORIGINAL_DST cluster = %+v, %v; want 503", res, err)
	}
}
