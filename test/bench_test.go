package test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/tokenizer/chat"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvrouter/kvrouter/extproc"
	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	kvfleet "github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// Measured 2026-11-21 on the 2-core development machine under load average
// 6–9 from other work (go test -run '^$' -bench Decision -benchmem ./test/):
//
//	completion/tokens=500/router     50–65 µs   (parse 5, tokenize 36–45, hash 6, match 2)
//	completion/tokens=500/extproc   250–380 µs  the whole Envoy-faithful exchange
//	completion/tokens=8000/router   0.73–1.6 ms (parse 62–177 µs, tokenize 0.54–1.2 ms)
//	completion/tokens=8000/extproc  1.3–2.3 ms
//	chat/tokens=8000/router          2.5 ms     (render + tokenize 1.9 ms)
//	chat/tokens=8000/extproc         4.1 ms
//
// make load (test/cmd/kvrouter-load) measures latency percentiles at a rate.

// benchPrompt is deterministic English-like text of about n Qwen3 tokens.
func benchPrompt(n int) string {
	words := strings.Fields("the router reads each request and sends it to the pod that already holds the longest prefix of its prompt in cache while weighing load")
	var b strings.Builder
	for i := 0; b.Len() < n*5; i++ {
		b.WriteString(words[(i*7)%len(words)])
		b.WriteByte(' ')
	}
	return b.String()
}

type benchRig struct {
	router *router.Router
	envoy  *envoyclient.Client
	tokens *tokenizer.Registry
}

// newBenchRig is 8 pods serving qwen3, one of which holds the prompt's
// blocks, with the router and the ext_proc server on loopback.
func newBenchRig(b *testing.B, prompt string) *benchRig {
	b.Helper()
	return newBenchRigPrefix(b, prompt, 0)
}

// qwen3Router is a router over 8 ready pods serving qwen3 (pod-0 …
// pod-7, 10.0.0.1 … 10.0.0.8), Qwen3's tokenizer with prefix caches of
// prefixBytes (0: none) and its chat template, its metrics registered in
// metrics (nil: none).
func qwen3Router(tb testing.TB, prefixBytes int64, metrics prometheus.Registerer) (*router.Router, *tokenizer.Registry, *kvindex.Index, *blockhash.Hasher) {
	tb.Helper()
	return qwen3RouterWith(tb, prefixBytes, metrics, router.DefaultConfig())
}

// qwen3RouterWith is qwen3Router with the router's configuration cfg.
func qwen3RouterWith(tb testing.TB, prefixBytes int64, metrics prometheus.Registerer, cfg router.Config) (*router.Router, *tokenizer.Registry, *kvindex.Index, *blockhash.Hasher) {
	tb.Helper()
	reg, err := tokenizer.NewRegistry(tokenizer.Config{Models: map[string]string{"qwen3": qwen3Dir(tb)}, MaxLoaded: 2, PrefixCacheBytes: prefixBytes})
	if err != nil {
		tb.Fatal(err)
	}
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	hasher, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	fleet := kvfleet.New(index)
	for i := range 8 {
		fleet.Upsert(kvpod.Pod{Name: fmt.Sprintf("pod-%d", i), IP: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Model: "qwen3", Ready: true})
		// Each pod has a learned prefill speed, as under a scraper (9,000
		// to 12,500 tokens/s), so that decisions price them as in production.
		fleet.Load(fmt.Sprintf("pod-%d", i)).SetSpeed(&kvfleet.Speed{Busy: 60, Tokens: 60 * 10000 * (0.9 + 0.05*float64(i))})
	}
	r, err := router.New(cfg, fleet, index, hasher, router.RegistryTokenizers{Registry: reg, Chats: chat.NewRegistry(reg, nil)}, slog.New(slog.DiscardHandler), metrics)
	if err != nil {
		tb.Fatal(err)
	}
	return r, reg, index, hasher
}

// newBenchRigPrefix is newBenchRig with prefix caches of prefixBytes a
// model (0: none).
func newBenchRigPrefix(b *testing.B, prompt string, prefixBytes int64) *benchRig {
	b.Helper()
	r, reg, index, hasher := qwen3Router(b, prefixBytes, nil)
	tk, err := reg.For("qwen3")
	if err != nil {
		b.Fatal(err)
	}
	ids, err := tk.Encode(prompt, true)
	if err != nil {
		b.Fatal(err)
	}
	pod, _ := index.Pod("pod-3")
	if err := index.Stored(pod, kvindex.TierGPU, hasher.AppendHashes(nil, ids, blockhash.Extra{})); err != nil {
		b.Fatal(err)
	}
	ext, err := extproc.New(extproc.DefaultConfig(), r, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = ext.Run(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return &benchRig{router: r, envoy: envoyclient.New(conn), tokens: reg}
}

// BenchmarkDecision is one routing decision for a completion prompt of 500
// and 8,000 tokens with 8 pods: the router alone (with its per-stage
// breakdown) and the whole ext_proc exchange over gRPC on loopback, as
// Envoy drives it (request and response phases).
func BenchmarkDecision(b *testing.B) {
	for _, bc := range []struct {
		kind string
		n    int
	}{{"completion", 500}, {"completion", 8000}, {"chat", 8000}} {
		n, prompt := bc.n, benchPrompt(bc.n)
		path, body := "/v1/completions", []byte(fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, prompt))
		if bc.kind == "chat" {
			path = "/v1/chat/completions"
			var msgs []string
			for i, part := range chunk(prompt, 10) {
				role := [2]string{"user", "assistant"}[i%2]
				msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, part))
			}
			body = []byte(`{"model":"qwen3","messages":[{"role":"system","content":"You are helpful."},` + strings.Join(msgs, ",") + `]}`)
		}
		rig := newBenchRig(b, prompt)
		b.Run(fmt.Sprintf("%s/tokens=%d/router", bc.kind, n), func(b *testing.B) {
			var sum router.Stages
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				d, err := rig.router.Route(context.Background(), router.Request{Path: path, Body: body})
				if err != nil || (bc.kind == "completion" && d.Pod != "pod-3") || d.Tokens < n*9/10 {
					b.Fatalf("Route = %+v, %v, want pod-3 and about %d tokens", d, err, n)
				}
				d.Done()
				sum.Parse += d.Stages.Parse
				sum.Tokenize += d.Stages.Tokenize
				sum.Hash += d.Stages.Hash
				sum.Match += d.Stages.Match
				sum.Score += d.Stages.Score
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(sum.Parse), "parse-µs")
			b.ReportMetric(per(sum.Tokenize), "tokenize-µs")
			b.ReportMetric(per(sum.Hash), "hash-µs")
			b.ReportMetric(per(sum.Match), "match-µs")
			b.ReportMetric(per(sum.Score), "score-µs")
		})
		b.Run(fmt.Sprintf("%s/tokens=%d/extproc", bc.kind, n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				res, err := rig.envoy.Do(context.Background(), envoyclient.Request{Path: path, Body: body, Chunks: []int{16384, 16384}})
				if err != nil || res.Status != 200 || res.UpstreamHeaders["x-kvrouter-reason"] == "tokenize-error" {
					b.Fatalf("Do = %+v, %v", res, err)
				}
			}
		})
	}
}

// chunk splits s into n pieces at spaces.
func chunk(s string, n int) []string {
	words := strings.Fields(s)
	var out []string
	for i := range n {
		out = append(out, strings.Join(words[i*len(words)/n:(i+1)*len(words)/n], " "))
	}
	return out
}
