package fleetsim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Request is one request of a workload. Its prompt is a run of segments
// of pseudo-random token ids: requests that share leading segments share
// that prefix token for token, and so its vLLM block hashes.
type Request struct {
	ID      int     // index in Workload.Requests
	Arrival float64 // seconds since the start
	Level   int     // index in Workload.Levels
	Prompt  int     // prompt tokens
	Output  int     // output tokens, >= 1
	Hashes  []uint64
	segs    []segment
}

// segment is n tokens of the token stream named id.
type segment struct {
	id uint64
	n  int
}

// Level is one load level of a workload: the requests arriving in
// [Start, End).
type Level struct {
	Name       string
	Start, End float64
	QPS        float64 // offered rate in the simulation
}

// Workload is a list of requests in arrival order. It is read-only once
// built and may be shared by concurrent runs.
type Workload struct {
	Name      string
	BlockSize int
	Hash      blockhash.Config // how Hashes were computed
	Levels    []Level
	Requests  []Request
}

// AppendTokens appends r's prompt token ids to dst.
func (r *Request) AppendTokens(dst []uint32) []uint32 {
	for _, s := range r.segs {
		for j := range s.n {
			dst = append(dst, token(s.id, j))
		}
	}
	return dst
}

// token is token j of stream id: a pseudo-random id of a 128k vocabulary.
func token(id uint64, j int) uint32 {
	return uint32(mix(id*0x9e3779b97f4a7c15+uint64(j)) % 128_000)
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// mooncakeLine is one line of a Mooncake trace.
type mooncakeLine struct {
	Timestamp    float64  `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// mooncakeBlock is the number of tokens behind one Mooncake hash id.
const mooncakeBlock = 512

// ReadMooncake reads a Mooncake trace (JSON lines) as one load level,
// hashing prompts with h. Only requests that arrive before limit seconds
// (trace time; 0: all) are kept. Each 512-token hash id is its own token
// stream, so equal ids give equal blocks, as in the trace.
func ReadMooncake(name string, rd io.Reader, h *blockhash.Hasher, limit float64) (*Workload, error) {
	w := &Workload{Name: name, BlockSize: h.BlockSize(), Hash: h.Config()}
	type chain struct {
		hashes []uint64
		last   blockhash.Digest
	}
	memo := map[uint64]chain{}
	var toks []uint32
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l mooncakeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("fleetsim: %s line %d: %w", name, len(w.Requests)+1, err)
		}
		at := l.Timestamp / 1000
		if limit > 0 && at >= limit {
			break
		}
		r := Request{ID: len(w.Requests), Arrival: at, Prompt: l.InputLength, Output: max(l.OutputLength, 1)}
		parent, first := h.Root(), true
		for k, id := range l.HashIDs {
			n := min(mooncakeBlock, l.InputLength-k*mooncakeBlock)
			if n <= 0 {
				break
			}
			r.segs = append(r.segs, segment{id: id, n: n})
			toks = (&Request{segs: []segment{{id, n}}}).AppendTokens(toks[:0])
			if n == mooncakeBlock {
				c, ok := memo[id]
				if !ok {
					c.hashes, c.last = h.Extend(nil, parent, first, toks, blockhash.Extra{})
					memo[id] = c
				}
				r.Hashes = append(r.Hashes, c.hashes...)
				parent, first = c.last, false
				continue
			}
			r.Hashes, _ = h.Extend(r.Hashes, parent, first, toks, blockhash.Extra{})
		}
		w.Requests = append(w.Requests, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fleetsim: read %s: %w", name, err)
	}
	if len(w.Requests) == 0 {
		return nil, fmt.Errorf("fleetsim: %s has no requests", name)
	}
	end := w.Requests[len(w.Requests)-1].Arrival
	w.Levels = []Level{{Name: "1x", Start: 0, End: math.Nextafter(end, math.Inf(1)), QPS: float64(len(w.Requests)) / max(end, 1)}}
	return w, nil
}

// Compress returns w with every arrival time divided by factor: the same
// requests factor times as fast. The requests' prompts are shared.
func (w *Workload) Compress(factor float64) *Workload {
	c := &Workload{Name: w.Name, BlockSize: w.BlockSize, Hash: w.Hash, Requests: slices.Clone(w.Requests)}
	for i := range c.Requests {
		c.Requests[i].Arrival /= factor
	}
	for _, l := range w.Levels {
		c.Levels = append(c.Levels, Level{
			Name: fmt.Sprintf("%gx", factor), Start: l.Start / factor, End: l.End / factor, QPS: l.QPS * factor,
		})
	}
	return c
}

// SharedPrefix are the parameters of the llm-d shared-prefix benchmark
// (inference-perf's shared_prefix generator).
type SharedPrefix struct {
	Groups       int       // prompt groups; 150 published
	PerGroup     int       // prompts per group; 5
	System       int       // tokens of a group's system prompt; 6,000
	Question     int       // tokens each prompt adds; 1,200
	Output       int       // output tokens per request; 1,000
	WarmupQPS    float64   // 15
	Warmup       float64   // seconds; 50
	Stages       []float64 // QPS of each stage
	Durations    []float64 // seconds of each stage; StageSeconds where missing
	StageSeconds float64
	QPSScale     float64 // simulated QPS per published QPS
	// Constant sends a stage's requests as inference-perf's constant load
	// does (constantSchedule) instead of as its Poisson load.
	Constant bool
	Seed     uint64
}

// PublishedSharedPrefix returns the published parameters, unscaled: the
// stages and durations of the published run's load configuration (about
// 750 requests, one pass over the prompts, per stage from 20 QPS; two
// from 40 QPS).
func PublishedSharedPrefix() SharedPrefix {
	return SharedPrefix{
		Groups: 150, PerGroup: 5, System: 6000, Question: 1200, Output: 1000,
		WarmupQPS: 15, Warmup: 50, StageSeconds: 50, QPSScale: 1, Seed: 1,
		Stages:    []float64{3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60},
		Durations: []float64{20, 20, 20, 38, 34, 30, 25, 21, 38, 36, 33, 30, 29, 27, 26, 25},
	}
}

// WorkingSet is the tokens of every distinct prompt.
func (p SharedPrefix) WorkingSet() int { return p.Groups * (p.System + p.PerGroup*p.Question) }

// Generate builds the workload as inference-perf's shared_prefix data
// and load generators do: the fixed prompts shuffled once; each stage
// sends int(rate × seconds) requests at the stage's scaled rate, the nth
// of them with prompt n of the shuffled list (cycled), each second of the
// schedule drawing a Poisson number of requests spread over it at
// exponential gaps (or, Constant, the stage's requests at exponential gaps
// scaled to fill it). Levels are named by the published QPS; a level ends
// at its nominal end or its last arrival, whichever is later.
func (p SharedPrefix) Generate(name string, h *blockhash.Hasher) *Workload {
	rng := rand.New(rand.NewPCG(p.Seed, 0x5a5))
	w := &Workload{Name: name, BlockSize: h.BlockSize(), Hash: h.Config()}
	type prompt struct {
		segs   []segment
		hashes []uint64
	}
	prompts := make([]prompt, 0, p.Groups*p.PerGroup)
	var toks []uint32
	for g := range p.Groups {
		for q := range p.PerGroup {
			r := Request{segs: []segment{{1<<40 | uint64(g), p.System}, {2<<40 | uint64(g*p.PerGroup+q), p.Question}}}
			toks = r.AppendTokens(toks[:0])
			prompts = append(prompts, prompt{segs: r.segs, hashes: h.AppendHashes(nil, toks, blockhash.Extra{})})
		}
	}
	rng.Shuffle(len(prompts), func(i, j int) { prompts[i], prompts[j] = prompts[j], prompts[i] })
	t := 0.0
	stage := func(label string, qps, seconds float64) {
		rate := qps * p.QPSScale
		l := Level{Name: label, Start: t, End: t + seconds, QPS: rate}
		var times []float64
		if p.Constant {
			times = constantSchedule(rng, seconds, int(rate*seconds))
		} else {
			times = poissonSchedule(rng, rate, int(rate*seconds))
		}
		for n, at := range times {
			pr := prompts[n%len(prompts)]
			w.Requests = append(w.Requests, Request{
				ID: len(w.Requests), Arrival: t + at, Level: len(w.Levels),
				Prompt: p.System + p.Question, Output: max(p.Output, 1), Hashes: pr.hashes, segs: pr.segs,
			})
			l.End = max(l.End, math.Nextafter(t+at, math.Inf(1)))
		}
		w.Levels = append(w.Levels, l)
		t = l.End
	}
	if p.Warmup > 0 {
		stage(fmt.Sprintf("warm-up %g", p.WarmupQPS), p.WarmupQPS, p.Warmup)
	}
	for i, q := range p.Stages {
		seconds := p.StageSeconds
		if i < len(p.Durations) {
			seconds = p.Durations[i]
		}
		stage(fmt.Sprintf("%g", q), q, seconds)
	}
	return w
}

// constantSchedule returns n send times (seconds from the start) over a
// stage of the given seconds the way inference-perf's constant timer makes
// them: n exponential gaps scaled to sum to the stage, each request one
// gap after the one before (the first one gap after the start, the last at
// its end). Not evenly spaced: the rate is constant over the stage only.
func constantSchedule(rng *rand.Rand, seconds float64, n int) []float64 {
	out := make([]float64, n)
	total := 0.0
	for i := range out {
		total += rng.ExpFloat64()
		out[i] = total
	}
	for i := range out {
		out[i] *= seconds / total
	}
	return out
}

// poissonSchedule returns n send times (seconds from the start) at rate
// per second the way inference-perf's Poisson timer makes them: each
// second draws a Poisson number k of requests and spreads them over that
// second at exponential gaps scaled to sum to it.
func poissonSchedule(rng *rand.Rand, rate float64, n int) []float64 {
	out := make([]float64, 0, n)
	gaps := make([]float64, 0, int(rate)+8)
	for sec := 0.0; len(out) < n; sec++ {
		k := 0 // Poisson(rate): unit-rate exponential arrivals within rate
		for sum := rng.ExpFloat64(); sum < rate; sum += rng.ExpFloat64() {
			k++
		}
		gaps = gaps[:0]
		total := 0.0
		for range k {
			g := rng.ExpFloat64()
			gaps = append(gaps, g)
			total += g
		}
		at := sec
		for _, g := range gaps {
			if len(out) == n {
				break
			}
			at += g / total
			out = append(out, at)
		}
	}
	return out
}
