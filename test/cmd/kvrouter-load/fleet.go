package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/kvlog"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// kvr is a running kvrouter with one publisher per static pod.
type kvr struct {
	cmd       *exec.Cmd
	admin     string
	conn      *grpc.ClientConn
	client    *envoyclient.Client
	pubs      []*vllmpub.Publisher
	cancel    context.CancelFunc
	pubDone   chan error
	published int // filler blocks published so far
	sent      int // batches published so far
	pods      int // pods whose events it follows
}

// start runs kvrouter serve with two models and n static pods. Nothing
// listens on the pods' HTTP ports (decisions only); their KV events come
// from publishers in this process.
func start(ctx context.Context, o options, n int, extra ...string) (*kvr, error) {
	pctx, cancel := context.WithCancel(ctx)
	k := &kvr{cancel: cancel, pubDone: make(chan error, n), pods: n}
	var args []string
	for i := range n {
		p, err := vllmpub.New(publisherConfig())
		if err != nil {
			k.stop()
			return nil, err
		}
		k.pubs = append(k.pubs, p)
		go func() { k.pubDone <- p.Run(pctx) }()
		args = append(args, "--pod", fmt.Sprintf("pod-%d=127.0.0.1:%d,model=qwen3,events=%s,replay=%s",
			i, 20000+i, portOf(p.Endpoint()), portOf(p.ReplayEndpoint())))
	}
	if err := k.launch(ctx, o, append(args, extra...)); err != nil {
		k.stop()
		return nil, err
	}
	return k, nil
}

// launch runs kvrouter serve with two models and args, and waits until it
// is ready with its k.pods pods' events connected.
func (k *kvr) launch(ctx context.Context, o options, args []string) error {
	args = append([]string{
		"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-format", "json",
		"--model", "qwen3=" + o.oracle + "/tokenizer-qwen3/models",
		"--model", "llama3=" + o.oracle + "/tokenizer-llama3_1/models",
	}, args...)
	if o.tls {
		args = append(args, "--grpc-tls", "on")
	}
	args = append(args, "--body-mode", string(o.bodyMode))
	k.cmd = exec.Command(o.kvrouter, args...)
	out, err := k.cmd.StderrPipe()
	if err != nil {
		k.cmd = nil
		return err
	}
	if err := k.cmd.Start(); err != nil {
		k.cmd = nil
		return fmt.Errorf("start %s (make build): %w", o.kvrouter, err)
	}
	urls, err := kvlog.Listening(out, os.Stderr, "admin server", "ext_proc gRPC server")
	if err != nil {
		return err
	}
	grpcAddr := urls["ext_proc gRPC server"]
	k.admin = strings.TrimPrefix(urls["admin server"], "http://")
	creds := insecure.NewCredentials()
	if o.tls { // a self-signed certificate: encrypted, not verified, as gateways call a picker
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // see above
	}
	if k.conn, err = grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds)); err != nil {
		return err
	}
	k.client = envoyclient.New(k.conn)
	if o.bodyMode == extproc.Buffered {
		k.client.Mode = envoyclient.Buffered
	}
	return k.waitReady(ctx)
}

// stop stops kvrouter (SIGTERM, and waits) and the publishers it owns.
func (k *kvr) stop() {
	if k.conn != nil {
		_ = k.conn.Close()
	}
	if k.cmd != nil {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		_ = k.cmd.Wait()
	}
	if k.cancel == nil {
		return
	}
	k.cancel()
	for range k.pubs {
		if err := <-k.pubDone; err != nil {
			fmt.Fprintln(os.Stderr, "kvrouter-load: publisher:", err)
		}
	}
}

// publisherConfig is a pod's publisher on free loopback ports, answering
// replays quickly.
func publisherConfig() vllmpub.Config {
	cfg := vllmpub.DefaultConfig()
	cfg.Endpoint, cfg.ReplayEndpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
	cfg.PollInterval = 25 * time.Millisecond
	return cfg
}

func portOf(endpoint string) string { return endpoint[strings.LastIndexByte(endpoint, ':')+1:] }

// waitReady waits for /readyz and for every pod's subscription.
func (k *kvr) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if k.get("/readyz") == nil && k.metric("kvrouter_kvevents_connected") == float64(k.pods) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("kvrouter not ready with every pod connected after 60s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (k *kvr) get(path string) error {
	resp, err := http.Get("http://" + k.admin + path)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

// eachMetricLine calls fn with every line of kvrouter's /metrics; false
// when they cannot be read.
func (k *kvr) eachMetricLine(fn func(line string)) bool {
	resp, err := http.Get("http://" + k.admin + "/metrics")
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
	return true
}

// liveHeap is kvrouter's live heap in bytes: a collection forced through
// /debug/pprof/heap?gc=1, then its heap in use (-1 when it cannot be read).
func (k *kvr) liveHeap() int {
	resp, err := http.Get("http://" + k.admin + "/debug/pprof/heap?gc=1")
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return int(k.metric("go_memstats_heap_alloc_bytes"))
}

// metric sums every series of an untyped/counter/gauge metric in kvrouter's
// /metrics (-1 when it cannot be read).
func (k *kvr) metric(name string) float64 {
	sum := 0.0
	ok := k.eachMetricLine(func(line string) {
		if !strings.HasPrefix(line, name) || len(line) <= len(name) || (line[len(name)] != ' ' && line[len(name)] != '{') {
			return
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	})
	if !ok {
		return -1
	}
	return sum
}

// histogram reads the cumulative buckets of a histogram in kvrouter's
// /metrics: upper bound → count (nil when it cannot be read).
func (k *kvr) histogram(name string) map[float64]float64 {
	out := map[float64]float64{}
	prefix := name + `_bucket{le="`
	ok := k.eachMetricLine(func(line string) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			return
		}
		le, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			return
		}
		bound, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(val, 64)
		if err1 == nil && err2 == nil {
			out[bound] = n
		}
	})
	if !ok {
		return nil
	}
	return out
}

func (k *kvr) entries() int { return int(k.metric("kvrouter_kvindex_entries")) }

// fill publishes distinct 16-block chains round-robin over the pods, in
// rounds the subscribers can take without overrunning the publishers'
// buffers, until entries more entries went into the index.
func (k *kvr) fill(ctx context.Context, entries int) error {
	const blocks, round = 16, 20000
	for sent := 0; sent < entries; {
		batches := 0
		for ; batches < round && sent < entries; batches++ {
			hashes := make([]uint64, blocks)
			for j := range hashes {
				k.published++
				hashes[j] = uint64(k.published) * 0x9e3779b97f4a7c15
			}
			if err := k.publish(ctx, (k.published/blocks)%len(k.pubs), hashes); err != nil {
				return err
			}
			sent += blocks
		}
		if err := k.applied(ctx, batches); err != nil {
			return err
		}
	}
	return nil
}

// publish sends one BlockStored batch of hashes from pod i.
func (k *kvr) publish(ctx context.Context, i int, hashes []uint64) error {
	payload, err := vllmpub.Encode(vllmpub.Batch{TS: 1.7e9, Events: []vllmpub.Event{{
		Type: "BlockStored", BlockHashes: hashes, BlockSize: blockhash.DefaultBlockSize,
	}}}, vllmpub.Form{})
	if err != nil {
		return err
	}
	k.sent++
	return k.pubs[i].Publish(ctx, payload)
}

// applied waits until kvrouter applied every batch published so far.
func (k *kvr) applied(ctx context.Context, last int) error {
	deadline := time.Now().Add(30*time.Second + time.Duration(last)*20*time.Microsecond)
	for k.metric("kvrouter_kvevents_batches_total") < float64(k.sent) {
		if time.Now().After(deadline) {
			return fmt.Errorf("kvrouter applied %.0f of the %d batches published", k.metric("kvrouter_kvevents_batches_total"), k.sent)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// hold scores the request to learn its prompt's block hashes and publishes
// them as stored on the first holders pods, so decisions find a prefix. It
// returns the prompt's token count.
func (k *kvr) hold(ctx context.Context, body []byte, holders int) (int, error) {
	resp, err := http.Post("http://"+k.admin+"/v1/score", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var rep struct {
		Tokens int      `json:"prompt_tokens"`
		Blocks []string `json:"block_hashes"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/v1/score: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return 0, fmt.Errorf("/v1/score: %w", err)
	}
	hashes := make([]uint64, len(rep.Blocks))
	for i, b := range rep.Blocks {
		if hashes[i], err = strconv.ParseUint(b, 10, 64); err != nil {
			return 0, fmt.Errorf("/v1/score: block hash %q: %w", b, err)
		}
	}
	n := min(holders, len(k.pubs))
	for i := range n {
		if err := k.publish(ctx, i, hashes); err != nil {
			return 0, err
		}
	}
	return rep.Tokens, k.applied(ctx, n)
}

// profile starts a CPU profile of kvrouter over the next d and returns a
// function that waits for it and writes it, with the allocations made
// meanwhile and the heap after, to dir/name-{profile,allocs,heap}.pprof. An empty dir
// profiles nothing.
func (k *kvr) profile(dir, name string, d time.Duration) func() error {
	if dir == "" {
		return func() error { return nil }
	}
	secs := max(1, int(d.Seconds()))
	done := make(chan error, 2)
	for _, kind := range []string{"profile", "allocs"} {
		go func() {
			done <- k.savePprof(fmt.Sprintf("/debug/pprof/%s?seconds=%d", kind, secs),
				filepath.Join(dir, name+"-"+kind+".pprof"))
		}()
	}
	return func() error {
		return errors.Join(<-done, <-done, k.savePprof("/debug/pprof/heap", filepath.Join(dir, name+"-heap.pprof")))
	}
}

func (k *kvr) savePprof(path, file string) error {
	resp, err := http.Get("http://" + k.admin + path)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}
