package tokenizer

import (
	"container/list"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
	// HFCache is a Hugging Face hub cache directory (holding
	// models--ORG--NAME/snapshots/REV/) searched for models not in Models;
	// empty: none.
	HFCache string
	// Aliases maps served model names and LoRA adapter names to the model
	// whose tokenizer they use.
	Aliases map[string]string
	// MaxLoaded bounds the tokenizers kept in memory; the least recently used
	// is dropped beyond it.
	MaxLoaded int
	// HubURL is the base URL of a Hugging Face hub to download models found
	// nowhere else from, into HFCache; empty: no downloads.
	HubURL string
	// HubToken is the bearer token sent to the hub; empty: none. Never logged.
	HubToken string
	// HubTimeout bounds one download request.
	HubTimeout time.Duration
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

// Registry maps model names to tokenizers, loading each once on first use
// (concurrent first uses share one load) and keeping the most recently used.
// It is safe for concurrent use.
type Registry struct {
	cfg    Config
	client *http.Client
	loads  singleflight.Group
	mu     struct {
		sync.Mutex
		lru     *list.List               // of *registryEntry, most recent first
		entries map[string]*list.Element // by base model name
		retired PrefixStats              // counters of the prefix caches of dropped models
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
	r := &Registry{cfg: cfg, client: &http.Client{Timeout: cfg.HubTimeout}}
	r.mu.lru = list.New()
	r.mu.entries = make(map[string]*list.Element)
	return r, nil
}

// For returns the tokenizer of a model, base or alias (served name, LoRA
// adapter). An unknown model gives an error wrapping ErrUnknownModel.
func (r *Registry) For(model string) (*Tokenizer, error) {
	name, err := r.cfg.base(model)
	if err != nil {
		return nil, err
	}
	if tok := r.cached(name); tok != nil {
		return tok, nil
	}
	v, err, _ := r.loads.Do(name, func() (any, error) {
		if tok := r.cached(name); tok != nil {
			return tok, nil
		}
		dir, err := r.Dir(name)
		if err != nil {
			return nil, err
		}
		tok, err := Load(dir)
		if err != nil {
			return nil, err
		}
		if r.cfg.PrefixCacheBytes > 0 {
			tok.prefixes = NewPrefixCache(tok, r.cfg.PrefixCacheBytes)
		}
		r.store(name, tok)
		return tok, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Tokenizer), nil
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
	r.mu.entries[name] = r.mu.lru.PushFront(&registryEntry{name, tok})
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

// Base returns the name model's files are found under: model itself, or
// the base model an alias in Config names.
func (r *Registry) Base(model string) (string, error) { return r.cfg.base(model) }

// Dir returns the directory of a base model's tokenizer files: its entry
// in Config.Models, or its snapshot in the Hugging Face cache, downloaded
// from the hub first when Config.HubURL is set and the cache lacks it.
func (r *Registry) Dir(name string) (string, error) {
	if dir, ok := r.cfg.Models[name]; ok {
		return dir, nil
	}
	if r.cfg.HFCache == "" {
		return "", fmt.Errorf("%w %q", ErrUnknownModel, name)
	}
	dir, err := hfSnapshot(r.cfg.HFCache, name)
	if errors.Is(err, ErrUnknownModel) && r.cfg.HubURL != "" {
		return r.hubDownload(name)
	}
	return dir, err
}

// hfSnapshot finds ORG/NAME in a Hugging Face cache: the snapshot that
// refs/main names, else the only snapshot.
func hfSnapshot(cache, name string) (string, error) {
	if name == "" || strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w %q", ErrUnknownModel, name)
	}
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(name, "/", "--"))
	snapshots := filepath.Join(repo, "snapshots")
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		rev := strings.TrimSpace(string(ref))
		if rev != "" && !strings.ContainsAny(rev, `/\`) && rev != ".." {
			return filepath.Join(snapshots, rev), nil
		}
	}
	entries, err := os.ReadDir(snapshots)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w %q (not in %s)", ErrUnknownModel, name, cache)
		}
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	var revs []string
	for _, e := range entries {
		if e.IsDir() {
			revs = append(revs, e.Name())
		}
	}
	sort.Strings(revs)
	switch len(revs) {
	case 0:
		return "", fmt.Errorf("%w %q (no snapshot in %s)", ErrUnknownModel, name, snapshots)
	case 1:
		return filepath.Join(snapshots, revs[0]), nil
	default:
		return "", fmt.Errorf("tokenizer: %s: %d snapshots and no refs/main", repo, len(revs))
	}
}
