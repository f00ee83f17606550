package tokenizer

import (
	"container/list"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// ErrUnknownModel is returned for a model name with no tokenizer: the router
// then routes by load alone.
var ErrUnknownModel = errors.New("tokenizer: unknown model")

// Config configures a Registry.
type Config struct {
	// Models maps a model name to the directory holding its tokenizer.json
	// and tokenizer_config.json.
	Models map[string]string
	// Repos maps a model name to its repository on the hub and revision,
	// found in HFCache or downloaded into it; a model in neither Models nor
	// Repos is the repository of its own name, at main.
	Repos map[string]Repo
	// HFCache is a Hugging Face hub cache directory (holding
	// models--ORG--NAME/snapshots/REV/, as vLLM's pods do) searched for
	// models not in Models; empty: none.
	HFCache string
	// Aliases maps served model names and LoRA adapter names to the model
	// whose tokenizer they use.
	Aliases map[string]string
	// MaxLoaded bounds the tokenizers kept in memory; the least recently used
	// is dropped beyond it.
	MaxLoaded int
	// HubURL is the base URL of a Hugging Face hub (or a mirror) to
	// download models missing from HFCache from, into HFCache; empty: no
	// downloads. Downloads happen in Run.
	HubURL string
	// HubToken is the bearer token sent to the hub; empty: none. Never logged.
	HubToken string
	// HubTokenFile, when set, holds the bearer token instead of HubToken
	// (a mounted secret), read at each download. Never logged.
	HubTokenFile string
	// HubTimeout bounds the download of one file.
	HubTimeout time.Duration
	// Offline forbids downloads: only Models and HFCache are read.
	Offline bool
	// PrefixCacheBytes is the memory budget of each loaded model's
	// PrefixCache (the ids of recent prompts, reused by the next turn of a
	// conversation); 0 turns the caches off.
	PrefixCacheBytes int64
}

// DefaultPrefixCacheBytes is DefaultConfig's PrefixCacheBytes: 64 MiB a
// model, the ids of about 7 million prompt tokens.
const DefaultPrefixCacheBytes = 64 << 20

// DefaultConfig returns a Config with no models, room for 8 tokenizers, a
// one-minute download timeout and a 64 MiB prefix cache per model.
func DefaultConfig() Config {
	return Config{MaxLoaded: 8, HubTimeout: time.Minute, PrefixCacheBytes: DefaultPrefixCacheBytes}
}

// Validate reports every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.PrefixCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("tokenizer: PrefixCacheBytes %d: want at least 0", c.PrefixCacheBytes))
	}
	if c.MaxLoaded < 1 {
		errs = append(errs, fmt.Errorf("tokenizer: MaxLoaded %d: want at least 1", c.MaxLoaded))
	}
	if c.HubURL != "" {
		if u, err := url.Parse(c.HubURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tokenizer: HubURL %q: want an http(s) URL", c.HubURL))
		}
		if c.HFCache == "" {
			errs = append(errs, errors.New("tokenizer: HubURL needs HFCache to download into"))
		}
		if c.HubTimeout <= 0 {
			errs = append(errs, fmt.Errorf("tokenizer: HubTimeout %v: want more than 0", c.HubTimeout))
		}
	}
	for name, dir := range c.Models {
		if name == "" || dir == "" {
			errs = append(errs, fmt.Errorf("tokenizer: model %q with directory %q: want both", name, dir))
		}
	}
	for name, repo := range c.Repos {
		if !repo.valid() {
			errs = append(errs, fmt.Errorf("tokenizer: model %q: repository %q: want ORG/NAME and a branch, tag or commit", name, repo.String()))
		}
	}
	for alias, target := range c.Aliases {
		if _, err := c.base(alias); err != nil {
			errs = append(errs, err)
		} else if alias == "" || target == "" {
			errs = append(errs, fmt.Errorf("tokenizer: alias %q -> %q: want both", alias, target))
		}
	}
	return errors.Join(errs...)
}

// base follows aliases from name to the model it stands for.
func (c Config) base(name string) (string, error) {
	for range len(c.Aliases) + 1 {
		target, ok := c.Aliases[name]
		if !ok {
			return name, nil
		}
		name = target
	}
	return "", fmt.Errorf("tokenizer: alias %q: cycle", name)
}

// repo is the hub repository of a base model.
func (c Config) repo(name string) Repo {
	if r, ok := c.Repos[name]; ok {
		return r
	}
	return Repo{ID: name}
}

// Registry maps model names to tokenizers, loading each once on first use
// (concurrent first uses share one load) and keeping the most recently used.
// It is safe for concurrent use.
type Registry struct {
	cfg       Config
	client    *http.Client
	loads     singleflight.Group
	fetches   singleflight.Group
	queue     chan string // base model names to fetch and load, for Run
	downloads atomic.Int64
	mu        struct {
		sync.Mutex
		lru      *list.List               // of *registryEntry, most recent first
		entries  map[string]*list.Element // by base model name
		retired  PrefixStats              // counters of the prefix caches of dropped models
		loaded   map[string]bool          // base models loaded once: their files are here
		queued   map[string]bool          // base models in queue or being fetched
		failures map[string]failure       // why a base model has no tokenizer
	}
}

type registryEntry struct {
	name string
	tok  *Tokenizer
}

// NewRegistry returns a registry; it loads nothing until asked.
func NewRegistry(cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Registry{cfg: cfg, client: &http.Client{}, queue: make(chan string, maxQueued)}
	r.mu.lru = list.New()
	r.mu.entries = make(map[string]*list.Element)
	r.mu.loaded, r.mu.queued, r.mu.failures = map[string]bool{}, map[string]bool{}, map[string]failure{}
	return r, nil
}

// For returns the tokenizer of a model, base or alias (served name, LoRA
// adapter). A model without one gives an error wrapping ErrUnknownModel;
// one whose files are still to be downloaded ErrPending, and the download
// is queued for Run (a model whose download failed is retried after a
// backoff, ErrUnknownModel meanwhile).
func (r *Registry) For(model string) (*Tokenizer, error) {
	name, err := r.cfg.base(model)
	if err != nil {
		return nil, err
	}
	if tok := r.cached(name); tok != nil {
		return tok, nil
	}
	v, err, _ := r.loads.Do(name, func() (any, error) {
		tok := r.cached(name)
		if tok != nil {
			return tok, nil
		}
		dir, err := r.Dir(name)
		if errors.Is(err, errNotCached) && r.downloading() {
			return nil, r.request(name)
		}
		if err == nil {
			tok, err = Load(dir)
		}
		if err != nil {
			r.fail(name, err, false)
			return nil, err
		}
		return r.keep(name, tok), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Tokenizer), nil
}

// keep makes tok the loaded tokenizer of name, with its prefix cache, and
// returns it.
func (r *Registry) keep(name string, tok *Tokenizer) *Tokenizer {
	if r.cfg.PrefixCacheBytes > 0 {
		tok.prefixes = NewPrefixCache(tok, r.cfg.PrefixCacheBytes)
	}
	r.store(name, tok)
	return tok
}

func (r *Registry) cached(name string) *Tokenizer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.mu.entries[name]; ok {
		r.mu.lru.MoveToFront(e)
		return e.Value.(*registryEntry).tok
	}
	return nil
}

func (r *Registry) store(name string, tok *Tokenizer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.mu.entries[name]; ok { // loaded twice at once: keep one
		e.Value.(*registryEntry).tok = tok
		r.mu.lru.MoveToFront(e)
		return
	}
	r.mu.entries[name] = r.mu.lru.PushFront(&registryEntry{name, tok})
	r.mu.loaded[name] = true
	delete(r.mu.failures, name)
	for r.mu.lru.Len() > r.cfg.MaxLoaded {
		oldest := r.mu.lru.Back()
		r.mu.lru.Remove(oldest)
		e := oldest.Value.(*registryEntry)
		delete(r.mu.entries, e.name)
		if c := e.tok.prefixes; c != nil {
			s := c.Stats()
			s.Entries, s.IDs, s.Bytes, s.Budget = 0, 0, 0, 0 // gone with the model
			r.mu.retired = r.mu.retired.Add(s)
		}
	}
}

// PrefixStats sums the prefix caches' stats over the loaded models; the
// counters include those of models dropped since.
func (r *Registry) PrefixStats() PrefixStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.mu.retired
	for e := r.mu.lru.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*registryEntry).tok.prefixes; c != nil {
			s = s.Add(c.Stats())
		}
	}
	return s
}

// PrefixCacheBytes is the budget of each model's prefix cache (0: none).
func (r *Registry) PrefixCacheBytes() int64 { return r.cfg.PrefixCacheBytes }

// Configured reports whether model is named in the configuration: a
// tokenizer directory, a hub repository or an alias.
func (r *Registry) Configured(model string) bool {
	_, dir := r.cfg.Models[model]
	_, repo := r.cfg.Repos[model]
	_, alias := r.cfg.Aliases[model]
	return dir || repo || alias
}

// Base returns the name model's files are found under: model itself, or
// the base model an alias in Config names.
func (r *Registry) Base(model string) (string, error) { return r.cfg.base(model) }

// Dir returns the directory of a base model's tokenizer files: its entry
// in Config.Models, or its snapshot in the Hugging Face cache. It
// downloads nothing (Fetch does).
func (r *Registry) Dir(name string) (string, error) {
	if dir, ok := r.cfg.Models[name]; ok {
		return dir, nil
	}
	if r.cfg.HFCache == "" {
		return "", fmt.Errorf("%w %q (not in the models, and no Hugging Face cache is set)", ErrUnknownModel, name)
	}
	dir, err := hfSnapshot(r.cfg.HFCache, r.cfg.repo(name))
	if errors.Is(err, errNotCached) {
		why := "no downloads: offline"
		if r.cfg.HubURL == "" {
			why = "no downloads: no hub"
		} else if !r.cfg.Offline {
			why = "to be downloaded"
		}
		return "", fmt.Errorf("%w %q: %w in %s (%s)", ErrUnknownModel, name, err, r.cfg.HFCache, why)
	}
	return dir, err
}
