package test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
)

// hostileRequest is one request a client may send to break the router, and
// the status it must get.
type hostileRequest struct {
	name   string
	path   string
	body   func() []byte
	chunk  int // body chunk size (FULL_DUPLEX_STREAMED); 0: 64 KiB
	status int
	reason string // x-kvrouter-reason of a routed request; "": any
	heavy  bool   // seconds of rendering under -race: make test-e2e only
}

func nested(open, end string, depth int, inner string) string {
	return strings.Repeat(open, depth) + inner + strings.Repeat(end, depth)
}

func hostileRequests() []hostileRequest {
	text := func(s string) func() []byte { return func() []byte { return []byte(s) } }
	return []hostileRequest{
		{"body over the limit", "/v1/completions", func() []byte {
			return fmt.Appendf(nil, `{"model":"qwen3","prompt":"%s"}`, strings.Repeat("a", 17<<20))
		}, 256 << 10, 413, "", false},
		{
			"JSON nested 20k deep in an unread field", "/v1/completions",
			text(`{"model":"qwen3","prompt":"hi","x":` + nested("[", "]", 20_000, "") + `}`), 0, 400, "", false,
		},
		{
			"JSON objects nested 20k deep", "/v1/completions",
			text(`{"model":"qwen3","prompt":"hi","x":` + nested(`{"a":`, "}", 20_000, "1") + `}`), 0, 400, "", false,
		},
		{
			"prompt nested 20k deep", "/v1/completions",
			text(`{"model":"qwen3","prompt":` + nested("[", "]", 20_000, "1") + `}`), 0, 400, "", false,
		},
		// The router leaves vLLM's schema checks to the pod: a chat it
		// cannot render is routed by load, and the pod answers 400.
		{
			"chat content nested 5k deep", "/v1/chat/completions",
			text(`{"model":"qwen3","messages":[{"role":"user","content":` + nested("[", "]", 5_000, "") + `}]}`), 0, 200, "tokenize-error", false,
		},
		{
			"invalid UTF-8 in the prompt", "/v1/completions",
			text("{\"model\":\"qwen3\",\"prompt\":\"caf\xc3\x28 \xff\xfe\"}"), 0, 400, "", false,
		},
		{
			"invalid UTF-8 in a message", "/v1/chat/completions",
			text("{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}"), 0, 400, "", false,
		},
		{
			"lone surrogate escape (valid JSON)", "/v1/completions",
			text(`{"model":"qwen3","prompt":"\ud800 is alone"}`), 0, 200, "", false,
		},
		{"100k messages", "/v1/chat/completions", func() []byte {
			var b strings.Builder
			b.WriteString(`{"model":"qwen3","messages":[`)
			for i := range 100_000 {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"role":"user","content":"m%d"}`, i)
			}
			b.WriteString(`]}`)
			return []byte(b.String())
		}, 0, 200, "", true},
		{"10k tools", "/v1/chat/completions", func() []byte {
			var b strings.Builder
			b.WriteString(`{"model":"qwen3","messages":[{"role":"user","content":"call one"}],"tools":[`)
			for i := range 10_000 {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"type":"function","function":{"name":"f%d","description":"tool %d","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}}`, i, i)
			}
			b.WriteString(`]}`)
			return []byte(b.String())
		}, 0, 200, "", true},
		{"prompt of 100k token ids", "/v1/completions", func() []byte {
			var b strings.Builder
			b.WriteString(`{"model":"qwen3","prompt":[`)
			for i := range 100_000 {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprint(&b, i%150_000)
			}
			b.WriteString(`]}`)
			return []byte(b.String())
		}, 0, 200, "", false},
		{
			"token id out of range", "/v1/completions",
			text(`{"model":"qwen3","prompt":[1,2,99999999999999999999]}`), 0, 400, "", false,
		},
		{"100k prompts in a batch", "/v1/completions", func() []byte {
			return []byte(`{"model":"qwen3","prompt":["a"` + strings.Repeat(`,"b"`, 100_000) + `]}`)
		}, 0, 200, "", false},
	}
}

func chunks(size, chunk int) []int {
	if chunk == 0 {
		chunk = 64 << 10
	}
	out := make([]int, 0, size/chunk+1)
	for ; size > 0; size -= chunk {
		out = append(out, min(size, chunk))
	}
	return out
}

// TestHostileRequests sends each hostile request through the Envoy-faithful
// client, then a burst of them several at once, and checks the statuses and
// that the heap the burst leaves behind, and its peak, stay bounded.
func TestHostileRequests(t *testing.T) {
	testHostileRequests(t, false)
}

// TestE2EHostileRequestsHeavy does the same with the requests that take
// seconds to render: 100k chat messages and 10k tools.
func TestE2EHostileRequestsHeavy(t *testing.T) {
	slowE2E(t)
	testHostileRequests(t, true)
}

func testHostileRequests(t *testing.T, heavy bool) {
	f := startFleetWith(t, fleetOptions{pods: 2})
	var reqs []hostileRequest
	for _, r := range hostileRequests() {
		if r.heavy == heavy {
			reqs = append(reqs, r)
		}
	}
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		bodies[i] = r.body()
	}
	do := func(i int) (status int, reason, detail string) {
		r := reqs[i]
		res, err := f.envoy.Do(context.Background(), envoyclient.Request{Path: r.path, Body: bodies[i], Chunks: chunks(len(bodies[i]), r.chunk)})
		if err != nil {
			return 0, "", err.Error()
		}
		return res.Status, res.UpstreamHeaders["x-kvrouter-reason"], string(res.ClientBody) + res.Details
	}
	for i, r := range reqs { // once each, for the status
		start := time.Now()
		got, reason, detail := do(i)
		if got != r.status || (r.reason != "" && reason != r.reason) {
			t.Errorf("%s: status %d, reason %q (%.200s), want %d %q", r.name, got, reason, detail, r.status, r.reason)
		}
		t.Logf("%s: %d %s in %v", r.name, got, reason, time.Since(start).Round(time.Millisecond))
	}
	if t.Failed() {
		return
	}

	before := heapAfterGC()
	peak := newHeapPeak()
	var wg sync.WaitGroup
	reps := 3
	if heavy {
		reps = 2
	}
	for w := range 4 { // a burst: every request reps times, 4 at a time
		wg.Go(func() {
			for k := range reps * len(reqs) {
				if k%4 != w {
					continue
				}
				if got, _, _ := do(k % len(reqs)); got != reqs[k%len(reqs)].status {
					t.Errorf("%s in the burst: status %d, want %d", reqs[k%len(reqs)].name, got, reqs[k%len(reqs)].status)
				}
			}
		})
	}
	wg.Wait()
	top := peak.stop()
	after := heapAfterGC()
	t.Logf("heap: %d MiB before, peak %d MiB in use during the burst, %d MiB after", before>>20, top>>20, after>>20)
	const retained, inUse = 64 << 20, 1 << 30
	if after > before+retained {
		t.Errorf("the burst left %d MiB more heap behind, want < %d MiB", (after-before)>>20, retained>>20)
	}
	if top > before+inUse {
		t.Errorf("heap in use peaked at %d MiB over the start, want < %d MiB", (top-before)>>20, inUse>>20)
	}
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// heapPeak samples the heap in use until stopped.
type heapPeak struct {
	stopc chan struct{}
	done  chan uint64
}

func newHeapPeak() *heapPeak {
	p := &heapPeak{stopc: make(chan struct{}), done: make(chan uint64, 1)}
	go func() {
		tick := time.NewTicker(5 * time.Millisecond) // sampling, not synchronization
		defer tick.Stop()
		var top uint64
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			top = max(top, m.HeapInuse)
			select {
			case <-p.stopc:
				p.done <- top
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *heapPeak) stop() uint64 {
	close(p.stopc)
	return <-p.done
}
