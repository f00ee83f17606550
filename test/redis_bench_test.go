package test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	kvpod "github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
	"github.com/kvrouter/kvrouter/router"
	kvfleet "github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
	"github.com/redis/go-redis/v9"
)

// BenchmarkDecisionRate routes the 8,000-token chat request of
// BenchmarkDecision at 100 requests/s, open loop (each request starts on
// its tick, whether or not the ones before have finished), over 8 pods of
// which one holds the prompt's blocks (and the pods of the decisions
// before, speculatively): with the memory backend and with the
// redis backend (a real redis-server on loopback, the replica running as
// kvrouter runs it: group writer, load writer, leases), in the same run. It
// reports p50 and p99 of the decision (Route) time, and with redis the
// APPENDs Redis ran per decision (speculation and settling: the one event
// is written before). Each request is prefilled and done 20 ms after its
// decision, settling its speculation and releasing its shared load.
//
//	go test -run '^$' -bench DecisionRate -benchtime 1000x ./test/
func BenchmarkDecisionRate(b *testing.B) {
	srv := redisserver.New(b)
	prompt := benchPrompt(8000)
	var msgs []string
	for i, part := range chunk(prompt, 10) {
		role := [2]string{"user", "assistant"}[i%2]
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, part))
	}
	body := []byte(`{"model":"qwen3","messages":[{"role":"system","content":"You are helpful."},` + strings.Join(msgs, ",") + `]}`)
	for _, backend := range []string{"memory", "redis"} {
		b.Run("chat/tokens=8000/rate=100/"+backend, func(b *testing.B) {
			r := rateRouter(b, backend, srv.Addr, body)
			const every = 10 * time.Millisecond
			times, matches := make([]time.Duration, b.N), make([]time.Duration, b.N)
			var wg sync.WaitGroup
			appends := appendCalls(b, backend, srv.Addr)
			start := time.Now()
			b.ResetTimer()
			for i := range b.N {
				time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					d, err := r.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: body})
					times[i] = time.Since(t0)
					if d != nil {
						matches[i] = d.Stages.Match
					}
					if err != nil || d.Matched != d.Total || d.Total < 400 {
						b.Errorf("Route = %+v, %v, want every block of about 470 matched", d, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
					d.Prefilled()
					d.Done()
				}()
			}
			wg.Wait()
			b.StopTimer()
			if backend == "redis" {
				time.Sleep(100 * time.Millisecond) // the last settling written
				b.ReportMetric(float64(appendCalls(b, backend, srv.Addr)-appends)/float64(b.N), "appends/op")
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs")
			slices.Sort(matches)
			b.ReportMetric(float64(matches[len(matches)*99/100].Microseconds()), "match-p99-µs")
		})
	}
}

// appendCalls is the APPENDs the Redis server at addr has run since it
// started (INFO commandstats); 0 for the memory backend.
func appendCalls(b *testing.B, backend, addr string) int64 {
	b.Helper()
	if backend != "redis" {
		return 0
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_append:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// rateRouter is qwen3Router's router over the given backend, pod-3 holding
// the blocks of body's rendered prompt.
func rateRouter(b *testing.B, backend, addr string, body []byte) *router.Router {
	b.Helper()
	reg, err := tokenizer.NewRegistry(tokenizer.Config{Models: map[string]string{"qwen3": qwen3Dir(b)}, MaxLoaded: 2})
	if err != nil {
		b.Fatal(err)
	}
	kcfg := kvindex.DefaultConfig()
	local, err := kvindex.New(kcfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	hasher, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	var idx interface {
		router.Index
		kvfleet.Index
		Stored(kvindex.PodID, kvindex.Tier, []uint64) error
	} = local
	var shared *redisindex.Index
	if backend == "redis" {
		cfg := redisindex.DefaultConfig()
		cfg.Addrs, cfg.Prefix = []string{addr}, fmt.Sprintf("rate%d:", time.Now().UnixNano())
		cfg.Timeout = 5 * time.Second // a loaded machine must not mark Redis down mid-run
		if shared, err = redisindex.New(cfg, local, kcfg, slog.New(slog.DiscardHandler), nil); err != nil {
			b.Fatal(err)
		}
		idx = shared
	}
	fleet := kvfleet.New(idx)
	for i := range 8 {
		fleet.Upsert(kvpod.Pod{Name: fmt.Sprintf("pod-%d", i), IP: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Model: "qwen3", Ready: true})
	}
	tok := &capturing{Tokenizers: router.RegistryTokenizers{Registry: reg, Chats: chat.NewRegistry(reg, nil)}}
	r, err := router.New(router.DefaultConfig(), fleet, idx, hasher, tok, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	if shared != nil {
		shared.Renew() // every lease, before the first event
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = shared.Run(ctx) }()
		b.Cleanup(func() { cancel(); <-done })
	}
	// Route once for the rendered prompt's tokens; pod-3 then stores its
	// blocks.
	d, err := r.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: body})
	if err != nil {
		b.Fatal(err)
	}
	d.Prefilled()
	d.Done()
	pod, _ := local.Pod("pod-3")
	if err := idx.Stored(pod, kvindex.TierGPU, hasher.AppendHashes(nil, tok.last, blockhash.Extra{})); err != nil {
		b.Fatal(err)
	}
	if shared != nil {
		if err := shared.Flush(); err != nil { // the event in Redis, not only queued
			b.Fatal(err)
		}
	}
	return r
}

// capturing keeps the tokens of the first prompt tokenized.
type capturing struct {
	router.Tokenizers
	mu   sync.Mutex
	last []uint32
}

func (c *capturing) AppendTokens(dst []uint32, model string, p *router.Parsed) ([]uint32, error) {
	dst, err := c.Tokenizers.AppendTokens(dst, model, p)
	c.mu.Lock()
	if c.last == nil {
		c.last = append([]uint32(nil), dst...)
	}
	c.mu.Unlock()
	return dst, err
}
