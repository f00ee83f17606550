package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// conversation is the body of a chat request of turns messages (user and
// assistant in turn, ending with a user message) of about 250 tokens each,
// its first message tagged with id so that conversations differ from
// their first bytes on.
func conversation(id, turns int) []byte {
	return conversationIn(router.KindChat, id, turns)
}

// conversationIn is conversation's body in the API of kind: chat, or the
// same conversation as an Anthropic Messages or OpenAI Responses body
// (which vLLM renders into the same prompt).
func conversationIn(kind router.Kind, id, turns int) []byte {
	const per = 250
	words := strings.Fields("the router reads each request and sends it to the pod that already holds the longest prefix of its prompt in cache while weighing load 12 345 6789")
	system := fmt.Sprintf("conversation %d: you are helpful.", id)
	var msgs []string
	if kind == router.KindChat {
		msgs = append(msgs, fmt.Sprintf(`{"role":"system","content":%q}`, system))
	}
	for t := range turns {
		var b strings.Builder
		for i := 0; b.Len() < per*5; i++ {
			b.WriteString(words[(i*7+t*3+id)%len(words)])
			b.WriteByte(' ')
		}
		role := [2]string{"user", "assistant"}[t%2]
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, b.String()))
	}
	switch kind {
	case router.KindMessages:
		return []byte(fmt.Sprintf(`{"model":"qwen3","max_tokens":1024,"system":%q,"messages":[%s]}`, system, strings.Join(msgs, ",")))
	case router.KindResponses:
		return []byte(fmt.Sprintf(`{"model":"qwen3","instructions":%q,"input":[%s]}`, system, strings.Join(msgs, ",")))
	}
	return []byte(`{"model":"qwen3","messages":[` + strings.Join(msgs, ",") + `]}`)
}

// benchConversations are the conversation sizes the prefix-cache
// benchmarks route: about 8k and 100k tokens.
var benchConversations = []struct {
	name  string
	turns int
}{{"tokens=8k", 25}, {"tokens=100k", 315}}

// prefixRigs returns two routers in one process: one without prefix
// caches, one with the default.
func prefixRigs(b *testing.B) (off, on *benchRig) {
	return newBenchRigPrefix(b, "unused", 0), newBenchRigPrefix(b, "unused", tokenizer.DefaultPrefixCacheBytes)
}

// BenchmarkConversation routes the next turn of a chat conversation of
// about 8k and 100k tokens right after its previous turn (the same
// conversation without its last answer and question, about 500 tokens
// fewer) was routed, through two routers in one process: one without
// prefix caches, one with them, alternately and in alternating order. It
// fails unless every measured turn of the cached router reused the
// previous turn's ids. Reported: each router's median decision and
// tokenize stage, and the ratio of the decisions (on/off).
func BenchmarkConversation(b *testing.B) {
	for _, bc := range benchConversations {
		b.Run(bc.name, func(b *testing.B) {
			off, on := prefixRigs(b)
			var offT, onT, offTok, onTok []time.Duration
			measure := func(rig *benchRig, body []byte, total, tok *[]time.Duration) {
				d := routeChat(b, rig, body)
				*total, *tok = append(*total, d.Elapsed), append(*tok, d.Stages.Tokenize)
			}
			for i := 0; b.Loop(); i++ {
				prev, next := conversation(i, bc.turns-2), conversation(i, bc.turns)
				routeChat(b, off, prev)
				routeChat(b, on, prev)
				hits := on.tokens.PrefixStats().Hits
				if i%2 == 0 {
					measure(off, next, &offT, &offTok)
					measure(on, next, &onT, &onTok)
				} else {
					measure(on, next, &onT, &onTok)
					measure(off, next, &offT, &offTok)
				}
				if on.tokens.PrefixStats().Hits != hits+1 {
					b.Fatalf("turn %d did not reuse the previous turn's ids", i)
				}
			}
			b.ReportMetric(medianMS(offT), "off-p50-ms")
			b.ReportMetric(medianMS(onT), "on-p50-ms")
			b.ReportMetric(medianMS(onT)/medianMS(offT), "on/off")
			b.ReportMetric(medianMS(offTok), "off-tokenize-p50-ms")
			b.ReportMetric(medianMS(onTok), "on-tokenize-p50-ms")
		})
	}
}

// BenchmarkColdTurn is the price of the prefix cache on a conversation it
// has never seen, in the state of a production process: two routers in
// one process, one without prefix caches and one whose cache is filled with
// other conversations until it evicts (both route those, so their indexes
// hold the same speculated blocks), route the same new conversation of
// about 8k and 100k tokens, alternately and in alternating order, so that
// the machine's swings fall on both alike. It fails unless the cached
// router's stores evict and no measured request reuses an id. Reported:
// each router's median decision, their ratio (on/off), and the collector's
// CPU time per pair of decisions with the full cache's heap live (gc-ms/op).
func BenchmarkColdTurn(b *testing.B) {
	for _, bc := range benchConversations {
		b.Run(bc.name, func(b *testing.B) {
			off, on := prefixRigs(b)
			route := func(rig *benchRig, body []byte) time.Duration { return routeChat(b, rig, body).Elapsed }
			i := 1 << 20 // the filling conversations' ids are below
			// Both routers route the filling conversations, so that their
			// indexes (speculated blocks) are alike too.
			for j := 0; on.tokens.PrefixStats().Evictions == 0; j++ {
				body := conversation(j, bc.turns)
				route(on, body)
				route(off, body)
			}
			full := on.tokens.PrefixStats()
			runtime.GC()
			gc0 := gcSeconds()
			var offT, onT []time.Duration
			for b.Loop() {
				i++
				body := conversation(i, bc.turns)
				if i%2 == 0 {
					offT = append(offT, route(off, body))
					onT = append(onT, route(on, body))
				} else {
					onT = append(onT, route(on, body))
					offT = append(offT, route(off, body))
				}
			}
			gcBoth := (gcSeconds() - gc0) / float64(b.N)
			switch after := on.tokens.PrefixStats(); {
			case after.Evictions == full.Evictions:
				b.Fatal("the full cache evicted nothing: not the state measured")
			case after.Hits != full.Hits:
				b.Fatalf("new conversations reused cached ids (%d hits): not cold", after.Hits-full.Hits)
			}
			b.ReportMetric(medianMS(offT), "off-p50-ms")
			b.ReportMetric(medianMS(onT), "on-p50-ms")
			b.ReportMetric(medianMS(onT)/medianMS(offT), "on/off")
			b.ReportMetric(gcBoth*1e3, "gc-ms/op")
		})
	}
}

// agentPaths are the paths of the APIs BenchmarkAgentTurn compares.
var agentPaths = map[router.Kind]string{router.KindChat: "/v1/chat/completions", router.KindMessages: "/v1/messages", router.KindResponses: "/v1/responses"}

// BenchmarkAgentTurn routes the next turn of a conversation of about 8k
// and 100k tokens right after its previous turn, as a chat completion, an
// Anthropic Messages and an OpenAI Responses body (three conversations of
// the same shape), through one router with prefix caches, in rotating
// order. It fails unless every measured turn reused the previous turn's
// ids. Reported: each API's median decision and its ratio to the chat's.
func BenchmarkAgentTurn(b *testing.B) {
	kinds := []router.Kind{router.KindChat, router.KindMessages, router.KindResponses}
	for _, bc := range benchConversations {
		b.Run(bc.name, func(b *testing.B) {
			_, rig := prefixRigs(b)
			ts := map[router.Kind][]time.Duration{}
			for i := 0; b.Loop(); i++ {
				for k, kind := range kinds {
					routeAt(b, rig, agentPaths[kind], conversationIn(kind, 3*i+k, bc.turns-2))
				}
				hits := rig.tokens.PrefixStats().Hits
				for j := range kinds {
					k := (i + j) % len(kinds)
					d := routeAt(b, rig, agentPaths[kinds[k]], conversationIn(kinds[k], 3*i+k, bc.turns))
					ts[kinds[k]] = append(ts[kinds[k]], d.Elapsed)
				}
				if rig.tokens.PrefixStats().Hits != hits+uint64(len(kinds)) {
					b.Fatalf("turn %d: not every API's turn reused the previous turn's ids", i)
				}
			}
			chat := medianMS(ts[router.KindChat])
			b.ReportMetric(chat, "chat-p50-ms")
			b.ReportMetric(medianMS(ts[router.KindMessages]), "messages-p50-ms")
			b.ReportMetric(medianMS(ts[router.KindResponses]), "responses-p50-ms")
			b.ReportMetric(medianMS(ts[router.KindMessages])/chat, "messages/chat")
			b.ReportMetric(medianMS(ts[router.KindResponses])/chat, "responses/chat")
		})
	}
}

// routeChat routes a chat body through rig's router, failing the benchmark
// on an error or a prompt not tokenized, and ends the decision.
func routeChat(b *testing.B, rig *benchRig, body []byte) *router.Decision {
	return routeAt(b, rig, "/v1/chat/completions", body)
}

// routeAt is routeChat for a body of the API of path.
func routeAt(b *testing.B, rig *benchRig, path string, body []byte) *router.Decision {
	d, err := rig.router.Route(context.Background(), router.Request{Path: path, Body: body})
	if err != nil || d.Reason == router.ReasonTokenizeError {
		b.Fatalf("Route = %+v, %v", d, err)
	}
	d.Done()
	return d
}

// medianMS is the median of ds in milliseconds; it sorts ds.
func medianMS(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds()) / 1e6
}

// gcSeconds is the CPU time the collector has used in this process so far.
func gcSeconds() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
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
