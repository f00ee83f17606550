package test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/sourcetext"
	"github.com/kvrouter/kvrouter/router"
)

// coldBodies are n chat conversations of turns messages that differ from
// their first bytes on.
func coldBodies(n, turns int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = conversation(1<<24+i, turns)
	}
	return out
}

// codeBodies are n chat conversations of at least size bytes whose
// messages are kvrouter's own source files (see sourcetext), each
// starting at another file, that differ from their first bytes on; with
// one, the files are one user message.
func codeBodies(b *testing.B, n, size int, one bool) [][]byte {
	files, err := sourcetext.Files("..", 2*size)
	if err != nil {
		b.Fatal(err)
	}
	out := make([][]byte, n)
	for i := range out {
		msgs := []map[string]string{{"role": "system", "content": fmt.Sprintf("conversation %d: you are a coding agent.", 1<<24+i)}}
		var texts []string
		for k, total := 0, 0; total < size; k++ {
			texts = append(texts, files[(i*7+k)%len(files)])
			total += len(texts[k])
		}
		if one {
			texts = []string{strings.Join(texts, "")}
		}
		for k, f := range texts {
			msgs = append(msgs, map[string]string{"role": [2]string{"user", "assistant"}[k%2], "content": f})
		}
		out[i], err = json.Marshal(map[string]any{"model": "qwen3", "messages": msgs})
		if err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkColdDecision routes chat conversations of about 8k and 100k
// tokens that no router has seen, through a router without prefix caches,
// so that every decision renders, tokenizes and hashes its whole prompt.
// The sequential cases report the median decision, its stages, and the
// CPU time of the whole process per decision (all its cores: work spread
// over several is counted in full); the busy cases route from as many
// goroutines as there are cores and report decisions per second; the
// score cases report the median stage sum of what /v1/score answers for
// the same bodies (its stage_ns: the evaluation alone, nothing recorded).
func BenchmarkColdDecision(b *testing.B) {
	for _, bc := range benchConversations {
		bodies := coldBodies(16, bc.turns)
		rig := newBenchRigPrefix(b, "unused", 0)
		b.Run(bc.name, func(b *testing.B) { benchColdSequential(b, rig, bodies) })
		b.Run(bc.name+"/score", func(b *testing.B) {
			var stages []time.Duration
			for i := 0; b.Loop(); i++ {
				rep, err := rig.router.Score(router.Request{Path: "/v1/chat/completions", Body: bodies[i%len(bodies)]})
				if err != nil || rep.Reason == router.ReasonTokenizeError {
					b.Fatalf("Score = %+v, %v", rep, err)
				}
				s := rep.Stages
				stages = append(stages, s.Parse+s.Tokenize+s.Hash+s.Match+s.Score)
			}
			b.ReportMetric(medianMS(stages), "stages-p50-ms")
		})
		b.Run(bc.name+"/busy", func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range 2 * runtime.GOMAXPROCS(0) {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						d, err := rig.router.Route(context.Background(), router.Request{Path: "/v1/chat/completions", Body: bodies[i%int64(len(bodies))]})
						if err != nil || d.Reason == router.ReasonTokenizeError {
							b.Errorf("Route = %+v, %v", d, err)
							return
						}
						d.Done()
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
		})
	}
	// Coding agents' prompts: many more distinct words than the generated
	// conversations above; then the same files in one message.
	bodies, rig := codeBodies(b, 16, 350<<10, false), newBenchRigPrefix(b, "unused", 0)
	b.Run("tokens=100k-code", func(b *testing.B) { benchColdSequential(b, rig, bodies) })
	bodies, rig = codeBodies(b, 16, 350<<10, true), newBenchRigPrefix(b, "unused", 0)
	b.Run("tokens=100k-code-one-message", func(b *testing.B) { benchColdSequential(b, rig, bodies) })
}

// benchColdSequential routes bodies in turn and reports the median
// decision, its stages, the process's CPU time per decision and the
// prompts' mean length in tokens.
func benchColdSequential(b *testing.B, rig *benchRig, bodies [][]byte) {
	var total, stages, parse, tok, hash, match []time.Duration
	tokens := 0
	cpu0 := cpuTime(b)
	for i := 0; b.Loop(); i++ {
		d := routeChat(b, rig, bodies[i%len(bodies)])
		tokens += d.Tokens
		s := d.Stages
		total = append(total, d.Elapsed)
		stages = append(stages, s.Parse+s.Tokenize+s.Hash+s.Match+s.Score)
		parse, tok = append(parse, s.Parse), append(tok, s.Tokenize)
		hash, match = append(hash, s.Hash), append(match, s.Match)
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
	b.ReportMetric(medianMS(total), "p50-ms")
	b.ReportMetric(medianMS(stages), "stages-p50-ms")
	b.ReportMetric(medianMS(parse), "parse-p50-ms")
	b.ReportMetric(medianMS(tok), "tokenize-p50-ms")
	b.ReportMetric(medianMS(hash), "hash-p50-ms")
	b.ReportMetric(medianMS(match), "match-p50-ms")
	b.ReportMetric(float64(tokens)/float64(b.N), "tokens/op")
}
