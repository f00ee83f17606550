package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// conversation is the body of a chat request of turns messages (user and
// assistant in turn, ending with a user message) of about per tokens each,
// its first message tagged with id so that conversations differ from
// their first bytes on.
func conversation(id, turns, per int) []byte {
	words := strings.Fields("the router reads each request and sends it to the pod that already holds the longest prefix of its prompt in cache while weighing load 12 345 6789")
	msgs := []string{fmt.Sprintf(`{"role":"system","content":"conversation %d: you are helpful."}`, id)}
	for t := range turns {
		var b strings.Builder
		for i := 0; b.Len() < per*5; i++ {
			b.WriteString(words[(i*7+t*3+id)%len(words)])
			b.WriteByte(' ')
		}
		role := [2]string{"user", "assistant"}[t%2]
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, b.String()))
	}
	return []byte(`{"model":"qwen3","messages":[` + strings.Join(msgs, ",") + `]}`)
}

// BenchmarkConversation routes the next turn of a chat conversation of
// about 100k and 8k tokens: "warm", the previous turn (the same
// conversation without its last answer and question, about 500 tokens
// fewer) having just been routed; "cold", a conversation never seen. With
// the prefix caches ("cache=on") and without them ("cache=off": every turn
// tokenized and hashed whole, as before the caches). Each iteration is a
// new conversation. Reported: the median decision and its tokenize and
// hash stages; allocations are those of the measured turn only.
func BenchmarkConversation(b *testing.B) {
	for _, bc := range []struct {
		name  string
		turns int
	}{{"tokens=100k", 315}, {"tokens=8k", 25}} {
		for _, mode := range []string{"cache=off/cold", "cache=on/cold", "cache=off/warm", "cache=on/warm"} {
			b.Run(bc.name+"/"+mode, func(b *testing.B) {
				var bytes int64
				if strings.HasPrefix(mode, "cache=on") {
					bytes = tokenizer.DefaultPrefixCacheBytes
				}
				rig := newBenchRigPrefix(b, "unused", bytes)
				route := func(body []byte) *router.Decision {
					d, err := rig.router.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: body})
					if err != nil || d.Reason == router.ReasonTokenizeError {
						b.Fatalf("Route = %+v, %v", d, err)
					}
					d.Done()
					return d
				}
				var took, parse, tok, hash, match []time.Duration
				var tokens int
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					b.StopTimer()
					next := conversation(i, bc.turns, 250)
					if strings.HasSuffix(mode, "warm") {
						route(conversation(i, bc.turns-2, 250))
					}
					b.StartTimer()
					d := route(next)
					took, parse, tok = append(took, d.Elapsed), append(parse, d.Stages.Parse), append(tok, d.Stages.Tokenize)
					hash, match = append(hash, d.Stages.Hash), append(match, d.Stages.Match)
					tokens = d.Tokens
				}
				p50 := func(ds []time.Duration) float64 {
					slices.Sort(ds)
					return float64(ds[len(ds)/2].Nanoseconds()) / 1e6
				}
				b.ReportMetric(p50(took), "p50-ms")
				b.ReportMetric(p50(parse), "parse-p50-ms")
				b.ReportMetric(p50(tok), "tokenize-p50-ms")
				b.ReportMetric(p50(hash), "hash-p50-ms")
				b.ReportMetric(p50(match), "match-p50-ms")
				b.ReportMetric(float64(tokens), "tokens")
			})
		}
	}
}

// BenchmarkMooncakePrefixCache replays the structure of the Mooncake
// conversation trace (testdata/traces, read as the fleet simulator reads
// it) through one model's prefix cache: every 512-token hash id becomes a
// chat message of text drawn from that id, so requests sharing leading
// ids share their rendered prefix. Reported: the share of requests that
// reused ids, the share of all prompt tokens reused (the trace's own block
// reuse with an unbounded cache bounds it: trace-bound), and the bytes
// held per cached token at the cache's fullest, with the default budget
// and with 1 GiB. Run with -benchtime 1x; -short replays the first 10
// minutes.
func BenchmarkMooncakePrefixCache(b *testing.B) {
	f, err := os.Open(filepath.Join(moduleRoot(b), "testdata", "traces", "conversation_trace.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	// As fleetsim.ReadMooncake reads it: 512 tokens per hash id, the last
	// block partial.
	type line struct {
		Timestamp   float64  `json:"timestamp"`
		InputLength int      `json:"input_length"`
		HashIDs     []uint64 `json:"hash_ids"`
	}
	var reqs []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			b.Fatal(err)
		}
		if testing.Short() && l.Timestamp >= 600_000 {
			break
		}
		reqs = append(reqs, l)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	tk, err := tokenizer.Load(qwen3Dir(b))
	if err != nil {
		b.Fatal(err)
	}
	words := strings.Fields("the router reads each request and sends it to the pod that already holds the longest prefix of its prompt in cache while weighing load")
	block := func(sb *strings.Builder, id uint64, n int) {
		r := rand.New(rand.NewPCG(id, 512))
		fmt.Fprintf(sb, "<|im_start|>user\nblock %d:", id)
		for range n {
			sb.WriteByte(' ')
			sb.WriteString(words[r.IntN(len(words))])
		}
		sb.WriteString("<|im_end|>\n")
	}
	// The trace's own bound: the tokens of blocks whose id (and so whole
	// prefix) an earlier request had.
	// A request continues a conversation when it shares more than the
	// system prompt (block 0) with an earlier one.
	seen := map[uint64]bool{}
	var bound, all int
	continues := make([]bool, len(reqs))
	for i, req := range reqs {
		shared := 0
		for k, id := range req.HashIDs {
			n := max(min(512, req.InputLength-k*512), 0)
			if seen[id] {
				bound += n
				shared++
			}
			seen[id] = true
			all += n
		}
		continues[i] = shared > 1
	}
	for _, budget := range []int64{tokenizer.DefaultPrefixCacheBytes, 1 << 30} {
		b.Run(fmt.Sprintf("budget=%dMiB", budget>>20), func(b *testing.B) {
			for b.Loop() {
				c := tokenizer.NewPrefixCache(tk, budget)
				var total, maxIDs, maxBytes int64
				var dst []uint32
				var conts, contHits int
				for i, req := range reqs {
					var sb strings.Builder
					for k, id := range req.HashIDs {
						if n := min(512, req.InputLength-k*512); n > 0 {
							block(&sb, id, max(n-12, 1))
						}
					}
					sb.WriteString("<|im_start|>assistant\n")
					var hit tokenizer.PrefixHit
					dst, hit, err = c.AppendEncode(dst[:0], sb.String(), false)
					if err != nil {
						b.Fatal(err)
					}
					if continues[i] {
						conts++
						if hit.Reused > 600 { // more than the system prompt's message
							contHits++
						}
					}
					total += int64(len(dst))
					if s := c.Stats(); s.IDs > maxIDs {
						maxIDs, maxBytes = s.IDs, s.Bytes
					}
				}
				s := c.Stats()
				b.ReportMetric(float64(s.Hits)/float64(s.Lookups), "hit-ratio")
				b.ReportMetric(float64(contHits)/float64(conts), "continuation-hit-ratio")
				b.ReportMetric(float64(conts)/float64(len(reqs)), "continuations")
				b.ReportMetric(float64(s.TokensReused)/float64(total), "tokens-reused")
				b.ReportMetric(float64(bound)/float64(all), "trace-bound")
				b.ReportMetric(float64(maxBytes)/float64(maxIDs), "bytes/cached-token")
				b.ReportMetric(float64(len(reqs)), "requests")
				b.ReportMetric(float64(s.Evictions), "evictions")
			}
		})
	}
}
