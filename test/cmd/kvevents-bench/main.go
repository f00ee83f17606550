// Command kvevents-bench measures kvrouter's KV-event subscriber the way
// it runs in production: a vLLM-faithful publisher in another process sends
// batches of one 16-block BlockStored over loopback TCP, and a
// kvevents.Manager applies them to a kvindex.Index in a process limited to
// one core (GOMAXPROCS=1 and, where taskset exists, pinned to one CPU with
// the publisher pinned to another). It reports the applied rate over wall
// time, the subscriber's CPU time per batch (user + system, libzmq's I/O
// thread included) and anything lost.
//
//	go run ./test/cmd/kvevents-bench -rate 100000 -count 1000000
//
// The parent process only starts the two roles and relays their output.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvevents"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvevents-bench:", err)
		os.Exit(1)
	}
}

type options struct {
	role             string
	rate             float64
	count, blocks    int
	mapEvents        bool
	fresh            bool
	pubCPU, subCPU   int
	endpoint, replay string
	timeout          time.Duration
	queueDepth       int
	noVerify         bool
	cpuProfile       string
	procs            int
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvevents-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.role, "role", "", "internal: pub or sub (empty: start both)")
	fs.Float64Var(&o.rate, "rate", 100000, "batches per second offered by the publisher (0: as fast as it can)")
	fs.IntVar(&o.count, "count", 1000000, "batches to publish")
	fs.IntVar(&o.blocks, "blocks", 16, "blocks per BlockStored event")
	fs.BoolVar(&o.mapEvents, "map-events", false, "encode events as maps (newer vLLM) instead of arrays")
	fs.BoolVar(&o.fresh, "fresh", false, "every batch stores new blocks (as vLLM's do; the index fills and then evicts) instead of cycling 4,096 chains; implies -no-verify, the hashes being random")
	fs.IntVar(&o.subCPU, "sub-cpu", 0, "CPU the subscriber is pinned to (-1: no pinning)")
	fs.IntVar(&o.pubCPU, "pub-cpu", 1, "CPU the publisher is pinned to (-1: no pinning)")
	fs.StringVar(&o.endpoint, "endpoint", "", "internal: the publisher's PUB endpoint")
	fs.StringVar(&o.replay, "replay-endpoint", "", "internal: the publisher's replay endpoint")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up when the batches are not all applied by then")
	fs.BoolVar(&o.noVerify, "no-verify", false, "turn hash verification off (default: the production setting, sampled once verified)")
	fs.IntVar(&o.queueDepth, "queue", kvevents.DefaultConfig().QueueSize, "the subscriber's queue size")
	fs.IntVar(&o.procs, "gomaxprocs", 1, "the subscriber's GOMAXPROCS (its CPU stays limited by -sub-cpu)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the subscriber's CPU profile of the measured window to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch o.role {
	case "":
		return orchestrate(ctx, args, stdout, stderr, o)
	case "pub":
		return publisher(ctx, stdin, stdout, o)
	case "sub":
		return subscriber(ctx, stdout, o)
	default:
		return fmt.Errorf("unknown role %q", o.role)
	}
}

// orchestrate starts the publisher, then the subscriber with the
// publisher's endpoints, tells the publisher to go once the subscriber is
// connected, and prints the subscriber's report.
func orchestrate(ctx context.Context, args []string, stdout, stderr io.Writer, o options) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pub := command(ctx, o.pubCPU, self, append([]string{"-role", "pub"}, args...)...)
	pub.Stderr = stderr
	pubIn, err := pub.StdinPipe()
	if err != nil {
		return err
	}
	pubOut, err := pub.StdoutPipe()
	if err != nil {
		return err
	}
	if err := pub.Start(); err != nil {
		return fmt.Errorf("start publisher: %w", err)
	}
	defer func() { _ = pub.Wait() }()
	defer func() { _ = pubIn.Close() }() // the publisher exits when its stdin closes
	pubLines := bufio.NewScanner(pubOut)
	if !pubLines.Scan() {
		return errors.New("the publisher printed no endpoints")
	}
	endpoints := strings.Fields(pubLines.Text())
	if len(endpoints) != 2 {
		return fmt.Errorf("publisher: unexpected first line %q", pubLines.Text())
	}
	sub := command(ctx, o.subCPU, self, append([]string{"-role", "sub", "-endpoint", endpoints[0], "-replay-endpoint", endpoints[1]}, args...)...)
	sub.Stderr = stderr
	subOut, err := sub.StdoutPipe()
	if err != nil {
		return err
	}
	if err := sub.Start(); err != nil {
		return fmt.Errorf("start subscriber: %w", err)
	}
	subLines := bufio.NewScanner(subOut)
	if !subLines.Scan() || subLines.Text() != "connected" {
		return errors.Join(errors.New("the subscriber did not connect"), sub.Wait())
	}
	if _, err := io.WriteString(pubIn, "go\n"); err != nil {
		return err
	}
	go func() {
		for pubLines.Scan() {
			fmt.Fprintln(stdout, "publisher:", pubLines.Text())
		}
	}()
	for subLines.Scan() {
		fmt.Fprintln(stdout, subLines.Text())
	}
	return sub.Wait()
}

// command runs self pinned to cpu when taskset is there and cpu >= 0.
func command(ctx context.Context, cpu int, self string, args ...string) *exec.Cmd {
	if taskset, err := exec.LookPath("taskset"); err == nil && cpu >= 0 && cpu < runtime.NumCPU() {
		return exec.CommandContext(ctx, taskset, append([]string{"-c", strconv.Itoa(cpu), self}, args...)...)
	}
	return exec.CommandContext(ctx, self, args...)
}

// publisher binds on loopback, prints its endpoints, waits for "go" on
// stdin, publishes o.count batches at o.rate, and keeps serving replays
// until stdin closes.
func publisher(ctx context.Context, stdin io.Reader, stdout io.Writer, o options) error {
	h, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		return err
	}
	// Distinct chains, hashed as vLLM would, encoded once: the publisher's
	// core goes to sending.
	payloads := make([][]byte, 4096)
	tokens := make([]uint32, o.blocks*h.BlockSize())
	var fresh *freshener
	for i := range payloads {
		for j := range tokens {
			tokens[j] = uint32(i*len(tokens)+j) % 150000
		}
		hashes := h.AppendHashes(nil, tokens, blockhash.Extra{})
		payloads[i], err = vllmpub.Encode(vllmpub.Batch{TS: 1.7e9, Events: []vllmpub.Event{{
			Type: "BlockStored", BlockHashes: hashes, TokenIDs: tokens, BlockSize: h.BlockSize(),
		}}}, vllmpub.Form{MapEvents: o.mapEvents})
		if err != nil {
			return err
		}
		if o.fresh && i == 0 {
			if fresh, err = newFreshener(payloads[0], hashes); err != nil {
				return err
			}
		}
	}
	cfg := vllmpub.DefaultConfig()
	cfg.Endpoint, cfg.ReplayEndpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
	p, err := vllmpub.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	fmt.Fprintln(stdout, p.Endpoint(), p.ReplayEndpoint())
	in := bufio.NewScanner(stdin)
	if !in.Scan() {
		cancel()
		return <-done
	}
	start := time.Now()
	for i := range o.count {
		if o.rate > 0 && i%64 == 0 {
			if ahead := time.Duration(float64(i)/o.rate*float64(time.Second)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		payload := payloads[i%len(payloads)]
		if fresh != nil {
			payload = fresh.batch(uint64(i))
		}
		if err := p.Publish(ctx, payload); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "sent %d batches in %.3fs (%.0f/s)\n", o.count, elapsed.Seconds(), float64(o.count)/elapsed.Seconds())
	for in.Scan() { // serve replays until the parent closes stdin
	}
	cancel()
	return <-done
}

// freshener rewrites the block hashes of one encoded batch so that every
// batch stores new blocks.
type freshener struct {
	template []byte
	at       []int // offsets of the hashes' 8 bytes
}

func newFreshener(payload []byte, hashes []uint64) (*freshener, error) {
	f := &freshener{template: payload}
	for _, h := range hashes {
		var enc [9]byte
		enc[0] = 0xcf // msgpack uint64
		binary.BigEndian.PutUint64(enc[1:], h)
		k := bytes.Index(payload, enc[:])
		if k < 0 {
			return nil, fmt.Errorf("hash %#x is not a msgpack uint64 in the payload", h)
		}
		f.at = append(f.at, k+1)
	}
	return f, nil
}

// batch returns a copy of the template with hashes unique to batch i.
func (f *freshener) batch(i uint64) []byte {
	out := slices.Clone(f.template)
	for j, k := range f.at {
		binary.BigEndian.PutUint64(out[k:], (i*uint64(len(f.at))+uint64(j)+1)*0x9e3779b97f4a7c15)
	}
	return out
}

// result is the subscriber's report.
type result struct {
	Offered         float64 `json:"offered_batches_per_s"`
	Batches         int     `json:"batches"`
	Applied         float64 `json:"applied"`
	WallSeconds     float64 `json:"wall_s"`
	CPUSeconds      float64 `json:"cpu_s"`
	WallRate        float64 `json:"batches_per_wall_s"`
	CPURate         float64 `json:"batches_per_cpu_s"`
	BlocksPerWall   float64 `json:"blocks_per_wall_s"`
	MicrosPerBatch  float64 `json:"cpu_us_per_batch"`
	Gaps            float64 `json:"gaps"`
	ReplaysOK       float64 `json:"replays_ok"`
	ReplaysFailed   float64 `json:"replays_failed"`
	QueueDrops      float64 `json:"queue_drops"`
	Clears          float64 `json:"clears"`
	IndexEntries    int     `json:"index_entries"`
	GOMAXPROCS      int     `json:"gomaxprocs"`
	PinnedCPU       int     `json:"pinned_cpu"`
	DecodeErrors    float64 `json:"decode_errors"`
	HashCheckFailed float64 `json:"hash_mismatches"`
}

// subscriber follows the publisher with a kvevents.Manager on one core and
// reports once every batch was applied.
func subscriber(ctx context.Context, stdout io.Writer, o options) error {
	runtime.GOMAXPROCS(o.procs)
	cfg := kvindex.DefaultConfig()
	cfg.MaxEntries = max(cfg.MaxEntries, o.count*o.blocks+1)
	idx, err := kvindex.New(cfg, nil)
	if err != nil {
		return err
	}
	kcfg := kvevents.DefaultConfig()
	kcfg.QueueSize = o.queueDepth
	if o.noVerify || o.fresh {
		kcfg.Hash.Algorithm = ""
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mgr, err := kvevents.NewManager(kcfg, idx, reg, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Run(ctx) }()
	evPort, err := portOf(o.endpoint)
	if err != nil {
		return err
	}
	rpPort, err := portOf(o.replay)
	if err != nil {
		return err
	}
	if err := mgr.Ensure(kvpod.Pod{Name: "bench", IP: "127.0.0.1", EventPort: evPort, ReplayPort: rpPort, Model: "m"}); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for metric(reg, "kvrouter_kvevents_connected") != 1 {
		if time.Now().After(deadline) {
			return errors.New("no connection to the publisher")
		}
		time.Sleep(time.Millisecond) // waiting on a real socket
	}
	fmt.Fprintln(stdout, "connected")
	// The clock starts at the first batch applied, so process start-up and
	// the publisher's reaction to "go" are not counted.
	for metric(reg, "kvrouter_kvevents_batches_total") == 0 {
		time.Sleep(100 * time.Microsecond) // waiting on a real socket
	}
	var profile *os.File
	if o.cpuProfile != "" {
		if profile, err = os.Create(o.cpuProfile); err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(profile); err != nil {
			return errors.Join(err, profile.Close())
		}
	}
	wall0, cpu0 := time.Now(), cpuTime()
	applied0 := metric(reg, "kvrouter_kvevents_batches_total")
	deadline = time.Now().Add(o.timeout)
	for metric(reg, "kvrouter_kvevents_last_seq") < float64(o.count-1) {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out: applied %v of %d batches", metric(reg, "kvrouter_kvevents_batches_total"), o.count)
		}
		time.Sleep(5 * time.Millisecond) // waiting on a real socket
	}
	wall, cpu := time.Since(wall0).Seconds(), cpuTime()-cpu0
	if profile != nil {
		pprof.StopCPUProfile()
		if err := profile.Close(); err != nil {
			return err
		}
	}
	applied := metric(reg, "kvrouter_kvevents_batches_total") - applied0
	cancel()
	if err := <-done; err != nil {
		return err
	}
	pinned := -1
	if _, err := exec.LookPath("taskset"); err == nil && o.subCPU >= 0 {
		pinned = o.subCPU
	}
	entries, _ := idx.Len()
	r := result{
		Offered: o.rate, Batches: o.count, Applied: applied, WallSeconds: wall, CPUSeconds: cpu,
		WallRate: applied / wall, CPURate: applied / cpu, BlocksPerWall: applied * float64(o.blocks) / wall,
		MicrosPerBatch: cpu / applied * 1e6,
		Gaps:           metric(reg, "kvrouter_kvevents_gaps_total"),
		ReplaysOK:      metricWith(reg, "kvrouter_kvevents_replays_total", "result", "ok"),
		ReplaysFailed:  metricWith(reg, "kvrouter_kvevents_replays_total", "result", "failed"),
		QueueDrops:     metric(reg, "kvrouter_kvevents_queue_drops_total"),
		Clears:         metric(reg, "kvrouter_kvevents_clears_total"),
		DecodeErrors:   metric(reg, "kvrouter_kvevents_decode_errors_total"),
		IndexEntries:   entries, GOMAXPROCS: runtime.GOMAXPROCS(0), PinnedCPU: pinned,
		HashCheckFailed: metricWith(reg, "kvrouter_kvevents_hash_checks_total", "result", "mismatch"),
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func portOf(endpoint string) (int, error) {
	i := strings.LastIndexByte(endpoint, ':')
	if i < 0 {
		return 0, fmt.Errorf("endpoint %q has no port", endpoint)
	}
	return strconv.Atoi(endpoint[i+1:])
}

// cpuTime is the process's user + system CPU time in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// metric sums every series of the named metric.
func metric(g prometheus.Gatherer, name string) float64 { return metricWith(g, name, "", "") }

// metricWith sums the series of the named metric whose label has value
// (every series when label is "").
func metricWith(g prometheus.Gatherer, name, label, value string) float64 {
	families, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && !hasLabel(m, label, value) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
