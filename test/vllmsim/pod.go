package vllmsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/router"
	"github.com/kvrouter/kvrouter/test/vllmpub"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// Config configures a simulated pod.
type Config struct {
	// Name appears in replies; Model is the model it serves.
	Name, Model string
	// LoRAs are the adapters it serves: a request naming one hashes its
	// blocks with the adapter's name, as vLLM does.
	LoRAs []string
	// Tokenizer is the model's tokenizer; nil: every byte is a token.
	Tokenizer *tokenizer.Tokenizer
	// Chat renders chat requests; nil: /v1/chat/completions answers 404.
	Chat *tokenizer.Chat
	// Hash is vLLM's hash configuration (--prefix-caching-hash-algo,
	// PYTHONHASHSEED, block size).
	Hash kvindex.HashConfig
	// CacheBlocks is the GPU cache size in blocks. Default 2048.
	CacheBlocks int
	// PrefillPerToken and DecodePerToken are the simulated costs. Defaults
	// 100µs and 2ms.
	PrefillPerToken, DecodePerToken time.Duration
	// OutputTokens is how many tokens each reply has. Default 12.
	OutputTokens int
	// Events configures the KV-event publisher.
	Events vllmpub.Config
}

// Pod is one simulated vLLM pod.
type Pod struct {
	cfg     Config
	hasher  *kvindex.Hasher
	pub     *vllmpub.Publisher
	mu      sync.Mutex // guards cache
	cache   *cache
	running atomic.Int64
	lose    atomic.Int64 // event batches still to lose on the wire
}

// New binds the pod's event sockets; Run serves them.
func New(cfg Config) (*Pod, error) {
	if cfg.CacheBlocks <= 0 {
		cfg.CacheBlocks = 2048
	}
	if cfg.PrefillPerToken <= 0 {
		cfg.PrefillPerToken = 100 * time.Microsecond
	}
	if cfg.DecodePerToken <= 0 {
		cfg.DecodePerToken = 2 * time.Millisecond
	}
	if cfg.OutputTokens <= 0 {
		cfg.OutputTokens = 12
	}
	h, err := kvindex.NewHasher(cfg.Hash)
	if err != nil {
		return nil, fmt.Errorf("vllmsim: %w", err)
	}
	pub, err := vllmpub.New(cfg.Events)
	if err != nil {
		return nil, fmt.Errorf("vllmsim: %w", err)
	}
	return &Pod{cfg: cfg, hasher: h, pub: pub, cache: newCache(cfg.CacheBlocks)}, nil
}

// Publisher returns the pod's event publisher (for its endpoints).
func (p *Pod) Publisher() *vllmpub.Publisher { return p.pub }

// Cached returns the block hashes the pod's cache holds, sorted: the
// truth a subscriber's index must converge to.
func (p *Pod) Cached() []uint64 {
	p.mu.Lock()
	out := make([]uint64, 0, len(p.cache.at))
	for h := range p.cache.at {
		out = append(out, h)
	}
	p.mu.Unlock()
	slices.Sort(out)
	return out
}

// LoseNext makes the pod's next n event batches take their sequence
// numbers and stay in the replay buffer without being sent, as when a PUB
// socket's high-water mark drops them.
func (p *Pod) LoseNext(n int) { p.lose.Add(int64(n)) }

// takeLoss reports whether the next batch is to be lost, counting it.
func (p *Pod) takeLoss() bool {
	for {
		n := p.lose.Load()
		if n <= 0 {
			return false
		}
		if p.lose.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// Run publishes events until ctx is done.
func (p *Pod) Run(ctx context.Context) error { return p.pub.Run(ctx) }

// Handler is the pod's OpenAI HTTP API.
func (p *Pod) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", p.completion)
	if p.cfg.Chat != nil && p.cfg.Tokenizer != nil {
		mux.HandleFunc("POST /v1/chat/completions", p.completion)
	}
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, p.cfg.Model)
	})
	mux.HandleFunc("GET /debug/cache", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Cached())
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		usage := p.cache.usage()
		p.mu.Unlock()
		fmt.Fprintf(w, "vllm:num_requests_running{model_name=%q} %d\nvllm:num_requests_waiting{model_name=%q} 0\nvllm:kv_cache_usage_perc{model_name=%q} %g\n",
			p.cfg.Model, p.running.Load(), p.cfg.Model, p.cfg.Model, usage)
	})
	return mux
}

// prefill looks the prompt up in the cache, stores its new blocks, publishes
// the change as KV events and returns how many prompt tokens were cached.
func (p *Pod) prefill(ctx context.Context, tokens []uint32, extra kvindex.Extra) (int, error) {
	hashes := p.hasher.AppendHashes(nil, tokens, extra)
	p.mu.Lock()
	hit := p.cache.lookup(hashes)
	evicted := p.cache.store(hashes[hit:])
	p.mu.Unlock()
	bs := p.hasher.BlockSize()
	var events []vllmpub.Event
	if len(evicted) > 0 {
		events = append(events, vllmpub.Event{Type: "BlockRemoved", BlockHashes: evicted})
	}
	if hit < len(hashes) {
		ev := vllmpub.Event{Type: "BlockStored", BlockHashes: hashes[hit:], TokenIDs: tokens[hit*bs : len(hashes)*bs], BlockSize: bs}
		if hit > 0 {
			parent := hashes[hit-1]
			ev.Parent = &parent
		}
		if extra.LoRA != "" {
			ev.LoRAName = &extra.LoRA
		}
		events = append(events, ev)
	}
	if len(events) > 0 {
		payload, err := vllmpub.Encode(vllmpub.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events}, vllmpub.Form{})
		if err != nil {
			return 0, err
		}
		publish := p.pub.Publish
		if p.takeLoss() {
			publish = p.pub.Lose
		}
		if err := publish(ctx, payload); err != nil {
			return 0, err
		}
	}
	return hit * bs, nil
}

func (p *Pod) completion(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := router.Parse(router.KindOf(r.URL.Path), body)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(router.AsError(err).JSON())
		return
	}
	tokens, err := p.tokens(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.running.Add(1)
	defer p.running.Add(-1)
	extra := kvindex.Extra{CacheSalt: req.CacheSalt}
	if slices.Contains(p.cfg.LoRAs, req.Model) {
		extra.LoRA = req.Model
	} else if req.Model != p.cfg.Model {
		http.Error(w, fmt.Sprintf("model %q is not served here", req.Model), http.StatusNotFound)
		return
	}
	cached, err := p.prefill(r.Context(), tokens, extra)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !sleep(r.Context(), time.Duration(len(tokens)-cached)*p.cfg.PrefillPerToken) {
		return
	}
	p.reply(w, r, req, len(tokens), cached)
}

// tokens is what vLLM would tokenize: ids as given, text with special
// tokens, or the rendered chat.
func (p *Pod) tokens(req *router.Parsed) ([]uint32, error) {
	switch {
	case req.PromptTokens != nil:
		return req.PromptTokens, nil
	case req.Chat != nil:
		cr, err := tokenizer.ParseChatRequest(req.Body)
		if err != nil {
			return nil, err
		}
		return p.cfg.Chat.Encode(p.cfg.Tokenizer, cr)
	default:
		return p.encode(req.Prompt)
	}
}

func (p *Pod) encode(text string) ([]uint32, error) {
	if p.cfg.Tokenizer == nil {
		ids := make([]uint32, len(text))
		for i := range len(text) {
			ids[i] = uint32(text[i])
		}
		return ids, nil
	}
	return p.cfg.Tokenizer.Encode(text, true)
}

// sleep waits d unless ctx ends first; it reports whether it waited.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var errTooLarge = errors.New("vllmsim: request body over 16 MiB")
