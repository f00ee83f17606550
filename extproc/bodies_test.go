package extproc

import (
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/pod"
	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/router/fleet"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

func TestBodyPoolClasses(t *testing.T) {
	var p bodyPool
	for _, tt := range []struct{ n, want int }{
		{0, 4096}, {1, 4096}, {4096, 4096}, {4097, 8192}, {35_000, 65_536}, {maxBodyHint, maxBodyHint},
	} {
		if b := p.get(tt.n); len(*b) != 0 || cap(*b) != tt.want {
			t.Errorf("get(%d) = len %d cap %d, want len 0 cap %d", tt.n, len(*b), cap(*b), tt.want)
		}
	}
}

func TestBodyPoolPoisonsWhatItRecycles(t *testing.T) {
	p := bodyPool{poison: true}
	b := p.get(5000)
	*b = append(*b, "hello"...)
	kept := *b
	p.put(b)
	if want := bytes.Repeat([]byte{poisonByte}, len(kept)); !bytes.Equal(kept, want) {
		t.Errorf("a recycled buffer reads %q, want poison", kept)
	}
	// A buffer of no class's capacity (one append grew) is not recycled.
	odd := append(make([]byte, 0, 5000), "hello"...)
	p.put(&odd)
	if string(odd) != "hello" {
		t.Errorf("an unrecycled buffer reads %q, want it untouched", odd)
	}
}

func TestBodyHint(t *testing.T) {
	for _, tt := range []struct {
		v     string
		limit int
		want  int
	}{
		{"", 16 << 20, 0},
		{"abc", 16 << 20, 0},
		{"-5", 16 << 20, 0},
		{"35000", 16 << 20, 35000},
		{"35000", 1000, 1000},
		{"16777216", 16 << 20, maxBodyHint},
		{"999999999999", 16 << 20, maxBodyHint},
		{"99999999999999999999999", 16 << 20, 0},
	} {
		if got := bodyHint(tt.v, tt.limit); got != tt.want {
			t.Errorf("bodyHint(%q, %d) = %d, want %d", tt.v, tt.limit, got, tt.want)
		}
	}
}

// leakyRouter breaks Router's contract on purpose: it keeps req.Body.
type leakyRouter struct {
	fakeRouter
	mu   sync.Mutex
	kept []byte
}

func (l *leakyRouter) Route(ctx context.Context, req router.Request) (*router.Decision, error) {
	l.mu.Lock()
	l.kept = req.Body
	l.mu.Unlock()
	return l.fakeRouter.Route(ctx, req)
}

// TestRecycledBodyIsPoisoned shows what the poison makes visible: a body
// gathered from chunks is recycled once the stream is answered, after its
// bytes were re-sent intact; one that came in one message is Envoy's, used
// as received and never recycled.
func TestRecycledBodyIsPoisoned(t *testing.T) {
	lr := &leakyRouter{}
	srv, err := New(DefaultConfig(), lr, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.bodies.poison = true
	_, client := serve(t, srv)
	big := []byte(`{"model":"qwen","prompt":"` + strings.Repeat("y", 100_000) + `"}`)
	tests := []struct {
		name     string
		req      envoyclient.Request
		recycled bool
	}{
		{"one message", envoyclient.Request{Path: "/v1/completions", Body: []byte(body)}, false},
		{"chunks", envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{7, 9}}, true},
		{"chunks of a body re-sent in two pieces", envoyclient.Request{Path: "/v1/completions", Body: big, Chunks: []int{16384, 16384}}, true},
		{"trailers", envoyclient.Request{Path: "/v1/completions", Body: []byte(body), Chunks: []int{7}, Trailers: [][2]string{{"x-t", "1"}}}, true},
		{"aborted mid-body", envoyclient.Request{Path: "/v1/completions", Body: big, Chunks: []int{16384}, AbortAfterBody: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := client.Do(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if tt.req.AbortAfterBody {
				return // nothing routed; the server must only survive it
			}
			checkRouted(t, res, tt.req.Body)
			lr.mu.Lock()
			kept := lr.kept
			lr.mu.Unlock()
			want := tt.req.Body
			if tt.recycled {
				want = bytes.Repeat([]byte{poisonByte}, len(kept))
			}
			if !bytes.Equal(kept, want) {
				t.Errorf("after the stream, the body the router saw reads %.40q, want %.40q (recycled %v)", kept, want, tt.recycled)
			}
		})
	}
}

// promptBytes tokenizes a prompt, or a chat request's messages printed as
// JSON, as their bytes: the ids come straight from what Parse read of the
// request body.
type promptBytes struct{}

func (promptBytes) AppendTokens(dst []uint32, _ string, p *router.Parsed) ([]uint32, error) {
	text := []byte(p.Prompt)
	if p.Chat != nil {
		s, err := jinja.ToJSON(jinja.NewList(p.Chat.Messages...))
		if err != nil {
			return dst, err
		}
		text = []byte(s)
	}
	for _, c := range text {
		dst = append(dst, uint32(c))
	}
	return dst, nil
}

// decisionView is what a client can learn of a decision, copied.
type decisionView struct {
	model, pod, address, reason string
	matched, total, tokens      int
}

func viewOf(d *router.Decision) decisionView {
	return decisionView{
		model: strings.Clone(d.Model), pod: strings.Clone(d.Pod), address: strings.Clone(d.Address), reason: strings.Clone(string(d.Reason)),
		matched: d.Matched, total: d.Total, tokens: d.Tokens,
	}
}

// keeper keeps every decision of a router and a copy of it as routed.
type keeper struct {
	r     *router.Router
	fleet *fleet.Fleet
	mu    sync.Mutex
	kept  []*router.Decision
	seen  []decisionView
}

func (k *keeper) Refused(id, path, model string, e *router.Error) { k.r.Refused(id, path, model, e) }

func (k *keeper) Route(ctx context.Context, req router.Request) (*router.Decision, error) {
	d, err := k.r.Route(ctx, req)
	if err == nil {
		k.mu.Lock()
		k.kept, k.seen = append(k.kept, d), append(k.seen, viewOf(d))
		k.mu.Unlock()
	}
	return d, err
}

func newKeeper(t *testing.T) *keeper {
	t.Helper()
	return newKeeperWith(t, router.DefaultConfig())
}

// newKeeperWith is newKeeper with the router's configuration.
func newKeeperWith(t *testing.T, cfg router.Config) *keeper {
	t.Helper()
	index, err := kvindex.New(kvindex.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hasher, err := blockhash.NewHasher(blockhash.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	fl := fleet.New(index)
	for i := range 4 {
		fl.Upsert(pod.Pod{Name: fmt.Sprintf("pod-%d", i), IP: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000, Model: "llama", Ready: true})
	}
	r, err := router.New(cfg, fl, index, hasher, promptBytes{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &keeper{r: r, fleet: fl}
}

// TestRecyclingKeepsEveryResult routes requests of every shape through
// the real router with recycled buffers poisoned: every re-sent body and
// routing header must be right when it is sent, every decision the same
// after all later requests, and a repeated prompt must find the blocks its
// first request's speculative entries recorded.
func TestRecyclingKeepsEveryResult(t *testing.T) {
	k := newKeeper(t)
	srv, err := New(DefaultConfig(), k, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.bodies.poison = true
	_, client := serve(t, srv)
	completion := func(n int, salt string) []byte {
		return fmt.Appendf(nil, `{"model":"llama","prompt":"%s %s","cache_salt":%q}`, salt, strings.Repeat("ab cd ", n/6), salt)
	}
	chat := func(n int, salt string) []byte {
		return fmt.Appendf(nil, `{"model":"llama","messages":[{"role":"user","content":"%s %s"}],"chat_template":"{{ messages }}"}`, salt, strings.Repeat("ef gh ", n/6))
	}
	var reqs []envoyclient.Request
	for i, size := range []int{300, 5_000, 40_000, 130_000} {
		for j, mk := range []func(int, string) []byte{completion, chat} {
			b := mk(size, fmt.Sprintf("s%d-%d", i, j))
			for _, shape := range []envoyclient.Request{
				{Chunks: []int{size / 3, size / 3}},
				{Chunks: []int{1000}, Headers: [][2]string{{"content-length", "10"}}},           // lies low
				{Chunks: []int{1000}, Headers: [][2]string{{"content-length", "999999999999"}}}, // lies high
				{Chunks: []int{100}, Headers: [][2]string{{"content-length", "x"}}},
				{Chunks: []int{50, 50}, Trailers: [][2]string{{"x-t", "1"}}},
				{}, // one message
			} {
				shape.Path, shape.Body = "/v1/completions", b
				if j == 1 {
					shape.Path = "/v1/chat/completions"
				}
				reqs = append(reqs, shape)
			}
		}
	}
	for i, req := range reqs {
		for repeat := range 2 {
			res, err := client.Do(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			k.mu.Lock()
			d := k.seen[len(k.seen)-1]
			k.mu.Unlock()
			if res.Status != 200 || !bytes.Equal(res.UpstreamBody, req.Body) || res.Destination != d.address || res.UpstreamHeaders["x-kvrouter-pod"] != d.pod {
				t.Fatalf("request %d (%s, chunks %v, headers %v) = %d to %q, %d bytes re-sent, want 200 to %q with the %d bytes sent",
					i, req.Path, req.Chunks, req.Headers, res.Status, res.Destination, len(res.UpstreamBody), d.address, len(req.Body))
			}
			if wantTokens := len(req.Body) - 80; d.model != "llama" || d.tokens < wantTokens || d.total != d.tokens/16 {
				t.Errorf("request %d decision = %+v, want model llama and at least %d tokens in %d-token blocks", i, d, wantTokens, 16)
			}
			if repeat == 1 && (d.matched != d.total || d.total == 0) {
				t.Errorf("request %d repeated: %d of %d blocks matched, want all: its first routing's speculative entries", i, d.matched, d.total)
			}
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, d := range k.kept {
		if got := viewOf(d); got != k.seen[i] {
			t.Errorf("decision %d now reads %+v, was %+v when routed", i, got, k.seen[i])
		}
	}
}

// TestBodyReadersDoNotUseUnsafe guards the proof that a body is dead once
// Route returns. Go's string conversions copy, so what the router and the
// chat request parser keep of a body (model names, templates, jinja
// values) never aliases it; package unsafe is the way to break that.
// Before allowing it in these files, check that nothing derived from a
// body outlives Route, then update this test.
func TestBodyReadersDoNotUseUnsafe(t *testing.T) {
	for _, pattern := range []string{"../router/*.go", "../tokenizer/chat/*.go", "../tokenizer/jinja/*.go", "../internal/jsonlex/*.go"} {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			t.Fatalf("Glob(%q) = %v, %v, want files", pattern, files, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				if imp.Path.Value == `"unsafe"` {
					t.Errorf("%s imports unsafe: extproc recycles request bodies once Route returns; check nothing it keeps aliases one", name)
				}
			}
		}
	}
}
