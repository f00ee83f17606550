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
	heap0 := k.liveHeap() // before the first event: tokenizers, subscribers
	rss0 := rss(k.cmd.Process.Pid, "VmRSS:")
	fmt.Fprintf(stdout, "soak: at start, live heap %d MiB, RSS %d MiB\n", heap0>>20, rss0/1024)
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
			sent := func() { mu.Lock(); k.sent++; mu.Unlock() }
			if err := churn(soakCtx, k.pubs[i], uint64(i), caches[i], so, sent); err != nil && soakCtx.Err() == nil {
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
				at: time.Since(t0).Round(time.Second), rssKB: rss(k.cmd.Process.Pid, "VmRSS:"), heap: k.liveHeap(),
				goroutines: int(k.metric("go_goroutines")), entries: k.entries(),
				prefixBytes: k.metric("kvrouter_tokenizer_prefix_cache_bytes"), prefixBudget: k.metric("kvrouter_tokenizer_prefix_cache_budget_bytes"),
				homes: int(k.metric("kvrouter_router_homed_prefixes")),
			}
			samples = append(samples, s)
			fmt.Fprintf(stdout, "  %6s live_heap=%d MiB rss=%d MiB goroutines=%d index_entries=%d prefix_cache=%.1f/%.0f MiB homes=%d batches=%.0f\n", s.at, s.heap>>20, s.rssKB/1024,
				s.goroutines, s.entries, s.prefixBytes/(1<<20), s.prefixBudget/(1<<20), s.homes, k.metric("kvrouter_kvevents_batches_total"))
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
	growth, note := checkGrowth(samples)
	problems = append(problems, growth...)
	if note != "" {
		fmt.Fprintln(stdout, "soak: "+note)
	}
	problems = append(problems, checkMemory(samples, heap0, rss0, so.maxEntries, max(int(k.metric("kvrouter_tokenizer_prefix_cache_budget_bytes")), 0),
		rss(k.cmd.Process.Pid, "VmHWM:"), stdout)...)
	slices.Sort(lat)
	fmt.Fprintf(stdout, "soak: %d decisions (%d failed, latency p50 %s, p99 %s, max %s), %.0f batches applied, final index %d entries\n",
		decided, failed, ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1)), k.metric("kvrouter_kvevents_batches_total"), k.entries())
	return errors.Join(problems...)
}

// churn publishes a pod's batches on pub at so.batchesPerSec until ctx is
// done, its chains drawn from seed, and calls sent after each.
func churn(ctx context.Context, pub *vllmpub.Publisher, seed uint64, c *podCache, so soakOptions, sent func()) error {
	rng := rand.New(rand.NewPCG(seed, 7))
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
		if err := pub.Publish(ctx, payload); err != nil {
			if ctx.Err() != nil {
				return nil // the soak is over; this batch was not sent
			}
			return err
		}
		sent()
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

// homesBound is what the homes hold at their bounds (65,536 prefixes,
// 2,097,152 marks): 93 MiB of live heap measured, docs/operations.md.
const homesBound = 95 << 20

// checkMemory checks the memory formula of docs/operations.md: the live
// heap never above what it was at start (heap0) plus what the bounded
// state may hold (the index bound at 50 bytes an entry, kvindex measuring
// about 45 and the soak 49; the prefix caches' budget over the models loaded; the homes
// at their bounds), and the peak RSS (KiB) never above what was outside
// the heap at start (rss0 KiB less heap0) plus twice that live bound (Go's
// collector lets the heap reach twice what is live between cycles).
func checkMemory(samples []soakSample, heap0, rss0, maxEntries, prefixBudget, peakRSS int, stdout io.Writer) []error {
	live := heap0 + maxEntries*50 + prefixBudget + homesBound
	formula := fmt.Sprintf("%d MiB at start + %d entries × 50 B + %d MiB of prefix caches + %d MiB of homes",
		heap0>>20, maxEntries, prefixBudget>>20, homesBound>>20)
	peakHeap := 0
	for _, s := range samples {
		peakHeap = max(peakHeap, s.heap)
	}
	var errs []error
	if heap0 <= 0 || peakHeap <= 0 {
		return []error{errors.New("kvrouter's live heap could not be read (/debug/pprof/heap?gc=1)")}
	}
	if peakHeap > live {
		errs = append(errs, fmt.Errorf("peak live heap %d MiB over the bound %d MiB (%s)", peakHeap>>20, live>>20, formula))
	}
	outside := max(rss0-heap0/1024, 0)
	if bound := outside + 2*live/1024; peakRSS > bound {
		errs = append(errs, fmt.Errorf("peak RSS %d MiB over the bound %d MiB (%d MiB outside the heap + 2 × %d MiB)", peakRSS/1024, bound/1024, outside/1024, live>>20))
	}
	fmt.Fprintf(stdout, "soak: peak live heap %d MiB, bound %d MiB (%s); peak RSS %d MiB, bound %d MiB (%d MiB outside the heap + twice that)\n",
		peakHeap>>20, live>>20, formula, peakRSS/1024, (outside+2*live/1024)/1024, outside/1024)
	return errs
}

type soakSample struct {
	at                        time.Duration
	rssKB, goroutines         int
	heap                      int // live heap, bytes
	entries, homes            int
	prefixBytes, prefixBudget float64
}

// fullFrom is the first sample from which every bounded cache is full,
// -1 for none: the index, the prefix caches and the homes each within 2%
// of its size at the end (its bound reached, or the workload's all it
// holds: the pods' caches full, every prompt cached), or the prefix caches
// within 10% of their budget.
func fullFrom(samples []soakSample) int {
	if len(samples) == 0 {
		return -1
	}
	end := samples[len(samples)-1]
	near := func(v, final float64) bool { return v >= 0.98*final }
	for i, s := range samples {
		if near(float64(s.entries), float64(end.entries)) && near(float64(s.homes), float64(end.homes)) &&
			(near(s.prefixBytes, end.prefixBytes) || s.prefixBytes >= 0.9*s.prefixBudget) {
			return i
		}
	}
	return -1
}

// checkGrowth fails when the goroutines at the end exceed those of the
// first sample by more than a few (in-flight requests come and go), or,
// once every bounded cache is full (fullFrom), the live heap of the last
// third of what follows exceeds the middle third's peak by more than 10%
// (memory still growing; the live heap, unlike RSS, does not wander with
// the collector's pace). When the caches fill too late to judge, it says
// so in note instead: the bounds are checked all the same.
func checkGrowth(samples []soakSample) (errs []error, note string) {
	if len(samples) < 6 {
		return []error{fmt.Errorf("only %d samples: soak longer", len(samples))}, ""
	}
	first, last := samples[0], samples[len(samples)-1]
	if last.goroutines > first.goroutines+16 {
		errs = append(errs, fmt.Errorf("goroutines grew from %d to %d", first.goroutines, last.goroutines))
	}
	i := fullFrom(samples)
	if i < 0 || len(samples)-i < 6 {
		when := "were never full"
		if i >= 0 {
			when = "were full only at " + samples[i].at.String()
		}
		return errs, "the caches " + when + ", too late to judge growth after it (soak longer); the bounds are checked all the same"
	}
	full := samples[i:]
	peak := func(s []soakSample) int {
		m := 0
		for _, x := range s {
			m = max(m, x.heap)
		}
		return m
	}
	third := len(full) / 3
	if mid, end := peak(full[third:2*third]), peak(full[2*third:]); end > mid*11/10 {
		errs = append(errs, fmt.Errorf("live heap still growing with the caches full (from %s): peak %d MiB in the middle third, %d MiB in the last", full[0].at, mid>>20, end>>20))
	}
	return errs, ""
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
