package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// soakOptions shape a soak run: o.pods[0] pods each publishing
// batchesPerSec batches (a 16-block chain stored, the oldest chain removed
// once the pod's cache of cacheBlocks is full) while requests arrive at
// o.rates[0] per second, for d.
type soakOptions struct {
	d             time.Duration
	batchesPerSec float64
	cacheBlocks   int
	maxEntries    int
	sample        time.Duration
}

// podCache is a publisher's model of its pod's GPU cache: chains in the
// order they were stored.
type podCache struct {
	chains [][]uint64
	blocks int
}

// soak runs the soak and fails when kvrouter's index differs from the pods'
// caches at the end, any decision or batch failed, its RSS grew past the
// bound or kept growing, or its goroutines grew.
func soak(ctx context.Context, o options, so soakOptions, stdout io.Writer) error {
	n := o.pods[0]
	k, err := start(ctx, o, n, "--max-index-entries", fmt.Sprint(so.maxEntries))
	if err != nil {
		return err
	}
	defer k.stop()
	fmt.Fprintf(stdout, "soak: %d pods × %.0f batches/s (16-block chains, %d-block caches), %d requests/s, %s, index bound %d entries\n",
		n, so.batchesPerSec, so.cacheBlocks, o.rates[0], so.d, so.maxEntries)
	baseKB := rss(k.cmd.Process.Pid, "VmRSS:")
	caches := make([]*podCache, n)
	for i := range caches {
		caches[i] = &podCache{}
	}
	soakCtx, cancel := context.WithTimeout(ctx, so.d)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex // k.sent
	errs := make(chan error, n+1)
	for i := range n {
		wg.Go(func() {
			if err := k.churn(soakCtx, i, caches[i], so, &mu); err != nil && soakCtx.Err() == nil {
				errs <- fmt.Errorf("pod-%d: %w", i, err)
				cancel()
			}
		})
	}
	var decided, failed int
	var lat []time.Duration
	wg.Go(func() {
		lat, failed, _ = drive(soakCtx, k.client, mixedRequests(), o.rates[0], 0, so.d)
		decided = len(lat)
	})
	var samples []soakSample
	t0 := time.Now()
	tick := time.NewTicker(so.sample)
	defer tick.Stop()
	for soakCtx.Err() == nil {
		select {
		case <-soakCtx.Done():
		case <-tick.C:
			s := soakSample{
				at: time.Since(t0).Round(time.Second), rssKB: rss(k.cmd.Process.Pid, "VmRSS:"),
				goroutines: int(k.metric("go_goroutines")), entries: k.entries(),
			}
			samples = append(samples, s)
			fmt.Fprintf(stdout, "  %6s rss=%d MiB goroutines=%d index_entries=%d batches=%.0f\n", s.at, s.rssKB/1024,
				s.goroutines, s.entries, k.metric("kvrouter_kvevents_batches_total"))
		}
	}
	wg.Wait()
	close(errs)
	var problems []error
	for err := range errs {
		problems = append(problems, err)
	}
	if err := k.applied(ctx, 0); err != nil {
		problems = append(problems, err)
	}
	// /debug/pods counts a pod's speculative entries too: the decisions'
	// expire and are swept within seconds once requests stop.
	for deadline := time.Now().Add(2 * time.Minute); k.metric("kvrouter_kvindex_speculative_entries") != 0; {
		if time.Now().After(deadline) {
			problems = append(problems, fmt.Errorf("%v speculative entries left 2 minutes after the last request", k.metric("kvrouter_kvindex_speculative_entries")))
			break
		}
		time.Sleep(100 * time.Millisecond) // waiting on another process
	}
	problems = append(problems, k.compare(caches)...)
	for _, m := range []string{
		"kvrouter_kvevents_decode_errors_total", "kvrouter_kvevents_clears_total", "kvrouter_kvevents_queue_drops_total",
		"kvrouter_kvevents_oversize_total", "kvrouter_kvevents_reconnects_total",
	} {
		if v := k.metric(m); v != 0 {
			problems = append(problems, fmt.Errorf("%s = %v, want 0", m, v))
		}
	}
	if failed > 0 {
		problems = append(problems, fmt.Errorf("%d of %d decisions failed", failed, decided+failed))
	}
	problems = append(problems, checkGrowth(samples)...)
	// What kvrouter held before the first event, plus the configured index
	// bound at 96 bytes per entry: kvindex measures about 45, and Go's
	// collector lets the heap reach twice what is live between cycles.
	if bound := baseKB + so.maxEntries*96/1024; rss(k.cmd.Process.Pid, "VmHWM:") > bound {
		problems = append(problems, fmt.Errorf("peak RSS %d MiB over the bound %d MiB (%d MiB at start + %d entries × 96 B)",
			rss(k.cmd.Process.Pid, "VmHWM:")/1024, bound/1024, baseKB/1024, so.maxEntries))
	}
	slices.Sort(lat)
	fmt.Fprintf(stdout, "soak: %d decisions (%d failed, latency p50 %s, p99 %s, max %s), %.0f batches applied, final index %d entries\n",
		decided, failed, ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1)), k.metric("kvrouter_kvevents_batches_total"), k.entries())
	return errors.Join(problems...)
}

// churn publishes pod i's batches at so.batchesPerSec until ctx is done.
func (k *kvr) churn(ctx context.Context, i int, c *podCache, so soakOptions, mu *sync.Mutex) error {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	interval := time.Duration(float64(time.Second) / so.batchesPerSec)
	next := time.Now().Add(time.Duration(rng.Int64N(int64(interval))))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		next = next.Add(interval)
		chain := make([]uint64, 16)
		for j := range chain {
			chain[j] = rng.Uint64()
		}
		events := []vllmpub.Event{{Type: "BlockStored", BlockHashes: chain, BlockSize: blockhash.DefaultBlockSize}}
		c.chains = append(c.chains, chain)
		c.blocks += len(chain)
		for c.blocks > so.cacheBlocks {
			old := c.chains[0]
			c.chains, c.blocks = c.chains[1:], c.blocks-len(old)
			events = append(events, vllmpub.Event{Type: "BlockRemoved", BlockHashes: old})
		}
		payload, err := vllmpub.Encode(vllmpub.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events}, vllmpub.Form{})
		if err != nil {
			return err
		}
		if err := k.pubs[i].Publish(ctx, payload); err != nil {
			if ctx.Err() != nil {
				return nil // the soak is over; this batch was not sent
			}
			return err
		}
		mu.Lock()
		k.sent++
		mu.Unlock()
	}
}

// compare checks kvrouter's per-pod entry counts against the pods' caches.
func (k *kvr) compare(caches []*podCache) []error {
	resp, err := http.Get("http://" + k.admin + "/debug/pods")
	if err != nil {
		return []error{err}
	}
	defer func() { _ = resp.Body.Close() }()
	var pods []struct {
		Name    string `json:"name"`
		Entries int    `json:"index_entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pods); err != nil {
		return []error{fmt.Errorf("/debug/pods: %w", err)}
	}
	var errs []error
	for _, p := range pods {
		var i int
		if _, err := fmt.Sscanf(p.Name, "pod-%d", &i); err != nil || i >= len(caches) {
			errs = append(errs, fmt.Errorf("/debug/pods: unexpected pod %q", p.Name))
			continue
		}
		if want := caches[i].blocks; p.Entries != want {
			errs = append(errs, fmt.Errorf("%s: index holds %d entries, the pod's cache %d blocks", p.Name, p.Entries, want))
		}
	}
	if len(pods) != len(caches) {
		errs = append(errs, fmt.Errorf("/debug/pods lists %d pods, want %d", len(pods), len(caches)))
	}
	return errs
}

type soakSample struct {
	at                time.Duration
	rssKB, goroutines int
	entries           int
}

// checkGrowth fails when the goroutines at the end exceed those of the
// first sample by more than a few (in-flight requests come and go), or the
// RSS of the last third exceeds the middle third's peak by more than 10%
// (memory still growing once the caches are full).
func checkGrowth(samples []soakSample) []error {
	if len(samples) < 6 {
		return []error{fmt.Errorf("only %d samples: soak longer", len(samples))}
	}
	var errs []error
	first, last := samples[0], samples[len(samples)-1]
	if last.goroutines > first.goroutines+16 {
		errs = append(errs, fmt.Errorf("goroutines grew from %d to %d", first.goroutines, last.goroutines))
	}
	peak := func(s []soakSample) int {
		m := 0
		for _, x := range s {
			m = max(m, x.rssKB)
		}
		return m
	}
	third := len(samples) / 3
	if mid, end := peak(samples[third:2*third]), peak(samples[2*third:]); end > mid*11/10 {
		errs = append(errs, fmt.Errorf("RSS still growing: peak %d MiB in the middle third, %d MiB in the last", mid/1024, end/1024))
	}
	return errs
}

// mixedRequests are 500-token chat and completion requests with 16
// different prefixes.
func mixedRequests() []envoyclient.Request {
	var reqs []envoyclient.Request
	for i := range 16 {
		path, body := request([2]string{"chat", "completion"}[i%2], 500)
		body = []byte(strings.Replace(string(body), "routing", fmt.Sprintf("routing %d", i), 1))
		reqs = append(reqs, envoyclient.Request{Path: path, Body: body, Chunks: []int{4096}})
	}
	return reqs
}
