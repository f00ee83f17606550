package render

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Decode reads a render answer, appending its token ids to dst: vLLM's
// GenerateRequest (vllm/entrypoints/scale_out/token_in_token_out/protocol.py
// at vLLM 5dfbdc4d) for a chat, Messages or Responses body, a list of them
// for a completion (the first prompt's is read). It reads token_ids
// without allocating per token, and features.mm_hashes and
// features.mm_placeholders (by modality, parallel lists) into the items,
// sorted by offset across modalities as vLLM orders them.
func Decode(dst []uint32, data []byte) (Result, error) {
	lx := jsonlex.New(data, jsonlex.Options{})
	r := Result{IDs: dst}
	seen := false
	one := func() error {
		if lx.Peek() != jsonlex.Object {
			return fmt.Errorf("%w: want an object", ErrMalformed)
		}
		return lx.Object(func(key []byte) error {
			switch string(key) {
			case "token_ids":
				seen = true
				var err error
				r.IDs, err = lx.Uint32s(r.IDs)
				return err
			case "features":
				raw, err := lx.Raw()
				if err != nil {
					return err
				}
				r.MM, err = readFeatures(raw)
				return err
			}
			return lx.Skip()
		})
	}
	var err error
	if lx.Peek() == jsonlex.Array { // a completion: one result per prompt
		first := true
		err = lx.Array(func() error {
			if !first {
				return lx.Skip()
			}
			first = false
			return one()
		})
	} else {
		err = one()
	}
	if err == nil {
		err = lx.End()
	}
	switch {
	case err != nil:
		return Result{IDs: dst}, fmt.Errorf("%w: %w", ErrMalformed, err)
	case !seen || len(r.IDs) == len(dst):
		return Result{IDs: dst}, fmt.Errorf("%w: no token_ids", ErrMalformed)
	}
	n := len(r.IDs) - len(dst)
	for _, it := range r.MM {
		if it.Offset < 0 || it.Length <= 0 || it.Offset+it.Length > n {
			return Result{IDs: dst}, fmt.Errorf("%w: placeholder [%d, +%d) outside the %d tokens", ErrMalformed, it.Offset, it.Length, n)
		}
	}
	return r, nil
}

// readFeatures reads features: null, or mm_hashes and mm_placeholders.
func readFeatures(raw []byte) ([]blockhash.MMItem, error) {
	var f *struct {
		Hashes       map[string][]string `json:"mm_hashes"`
		Placeholders map[string][]struct {
			Offset int `json:"offset"`
			Length int `json:"length"`
		} `json:"mm_placeholders"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, nil
	}
	var items []blockhash.MMItem
	for modality, hs := range f.Hashes {
		ps := f.Placeholders[modality]
		if len(ps) != len(hs) {
			return nil, fmt.Errorf("%d %s hashes but %d placeholders", len(hs), modality, len(ps))
		}
		for i, h := range hs {
			items = append(items, blockhash.MMItem{Hash: h, Offset: ps[i].Offset, Length: ps[i].Length})
		}
	}
	for modality := range f.Placeholders {
		if _, ok := f.Hashes[modality]; !ok {
			return nil, fmt.Errorf("%s placeholders without hashes", modality)
		}
	}
	slices.SortFunc(items, func(a, b blockhash.MMItem) int { return a.Offset - b.Offset })
	for i := 1; i < len(items); i++ {
		if items[i].Offset < items[i-1].Offset+items[i-1].Length {
			return nil, fmt.Errorf("placeholders overlap at token %d", items[i].Offset)
		}
	}
	return items, nil
}

// statusError is an endpoint's error answer: a 404 that is not vLLM's
// ErrorResponse means the render path is not served there.
func statusError(ep string, code int, data []byte) error {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	if e.Error == nil {
		if code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
			return fmt.Errorf("%w: %s answered %d", ErrNotServed, ep, code)
		}
		msg := string(data)
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &StatusError{Endpoint: ep, Code: code, Message: msg}
	}
	return &StatusError{Endpoint: ep, Code: code, Message: e.Error.Message}
}

// breaker is one endpoint's circuit breaker.
type breaker struct {
	failures int
	openTill time.Time
	trial    bool // open, one call let through to see
}

// admit returns the breaker of endpoint ep's render path rp (a path one
// server lacks, another it serves), and whether ep may be called now: its
// breaker is closed, or open past its cooldown and no trial call is out.
func (c *Client) admit(ep, rp string, now time.Time) (*breaker, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := breakerKey{ep, rp}
	b := c.breakers[k]
	if b == nil {
		b = &breaker{}
		c.breakers[k] = b
	}
	switch {
	case b.openTill.IsZero():
		return b, true
	case now.Before(b.openTill) || b.trial:
		return b, false
	}
	b.trial = true
	return b, true
}

// breakerKey names a breaker: an endpoint and a render path.
type breakerKey struct{ ep, rp string }

// recorded counts a call's outcome: an endpoint failure adds to its run
// (opening the breaker at cfg.Failures, or at once after a trial); a
// not-served path opens it for ten cooldowns; anything else closes it.
func (c *Client) recorded(b *breaker, now time.Time, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.trial = false
	switch outcome {
	case OutcomeError, OutcomeTimeout:
		b.failures++
		if b.failures >= c.cfg.Failures || !b.openTill.IsZero() {
			b.openTill = now.Add(c.cfg.Cooldown)
		}
	case OutcomeNotServed:
		b.failures, b.openTill = 0, now.Add(10*c.cfg.Cooldown)
	default:
		b.failures, b.openTill = 0, time.Time{}
	}
}

// Open reports whether ep's breaker for the render path of path is open
// now.
func (c *Client) Open(ep, path string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.breakers[breakerKey{ep, Path(path)}]
	return b != nil && now.Before(b.openTill)
}

// reuseCache holds recent answers by body, up to reuseMax.
type reuseCache struct {
	mu    sync.Mutex
	m     map[uint64]*reuseEntry
	order []uint64
}

type reuseEntry struct {
	r     Result
	until time.Time
}

const reuseMax = 1024

func (rc *reuseCache) get(k uint64, now time.Time) (Result, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.m[k]
	if e == nil || now.After(e.until) {
		return Result{}, false
	}
	return e.r, true
}

func (rc *reuseCache) put(k uint64, r Result, until time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, ok := rc.m[k]; !ok {
		if len(rc.order) == reuseMax {
			delete(rc.m, rc.order[0])
			rc.order = rc.order[1:]
		}
		rc.order = append(rc.order, k)
	}
	rc.m[k] = &reuseEntry{r: r, until: until}
}
