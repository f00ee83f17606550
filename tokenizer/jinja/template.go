package jinja

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Limits bound what one compile or render may cost.
type Limits struct {
	// MaxOutput is the most bytes a render may produce (and the longest
	// string it may build).
	MaxOutput int
	// MaxIterations is the most loop iterations (and range() items) per
	// render.
	MaxIterations int
	// MaxCallDepth is the deepest macro call nesting; jinja2 fails deeper
	// recursion with RecursionError.
	MaxCallDepth int
	// MaxNesting is the deepest block and expression nesting a template may
	// have.
	MaxNesting int
	// MaxSource is the longest template source accepted, in bytes.
	MaxSource int
}

// DefaultLimits returns limits far above what real chat templates need.
func DefaultLimits() Limits {
	return Limits{
		MaxOutput:     16 << 20,
		MaxIterations: 1 << 20,
		MaxCallDepth:  200,
		MaxNesting:    200,
		MaxSource:     1 << 20,
	}
}

// Template is a compiled template. It is immutable and safe for concurrent
// renders.
type Template struct {
	body         []stmt
	limits       Limits
	loopsContent bool
}

// Compile parses a template with DefaultLimits.
func Compile(src string) (*Template, error) { return CompileWithLimits(src, DefaultLimits()) }

// CompileWithLimits parses a template; its renders use the same limits.
func CompileWithLimits(src string, lim Limits) (t *Template, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("%w: %v", errInternal, p)
		}
	}()
	if len(src) > lim.MaxSource {
		return nil, fmt.Errorf("%w: template of %d bytes, at most %d", ErrLimit, len(src), lim.MaxSource)
	}
	segs, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{segs: segs, maxDepth: lim.MaxNesting, line: 1}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	markClosures(body)
	return &Template{body: body, limits: lim, loopsContent: loopsOverContent(body)}, nil
}

// RenderOptions are the parts of a render besides the context.
type RenderOptions struct {
	// Now is the clock strftime_now reads; nil: time.Now.
	Now func() time.Time
	// SizeHint is the expected output length in bytes: the output buffer
	// starts that large (at most Limits.MaxOutput), so that a render the
	// caller sized well allocates its output once. 0: 1 KiB.
	SizeHint int
}

// Render evaluates the template with the variables of ctx.
func (t *Template) Render(ctx map[string]Value) (string, error) {
	return t.RenderWith(ctx, RenderOptions{})
}

// RenderWith evaluates the template with the variables of ctx.
func (t *Template) RenderWith(ctx map[string]Value, opt RenderOptions) (out string, err error) {
	r := &renderer{out: &strings.Builder{}, limits: t.limits, now: opt.Now}
	if r.now == nil {
		r.now = time.Now
	}
	root := &scope{vars: make(map[string]Value, len(ctx)+4), parent: globalScope}
	for k, v := range ctx {
		root.vars[k] = v
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("%w: %v", errInternal, p)
		}
	}()
	r.out.Grow(min(max(opt.SizeHint, 1024), t.limits.MaxOutput))
	if err := r.execBody(t.body, root); err != nil {
		if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
			return "", fmt.Errorf("%w: break or continue outside a loop", ErrSyntax)
		}
		return "", err
	}
	return r.out.String(), nil
}

// errInternal marks a bug in the interpreter caught at the render boundary.
var errInternal = errors.New("jinja: internal error")

// Cache keeps compiled templates by source; it is safe for concurrent use.
type Cache struct {
	limits Limits
	max    int
	mu     struct {
		sync.Mutex
		m map[string]*Template
	}
}

// NewCache returns a cache of up to max templates compiled with lim.
func NewCache(lim Limits, maxEntries int) *Cache {
	c := &Cache{limits: lim, max: maxEntries}
	c.mu.m = map[string]*Template{}
	return c
}

// Get returns the compiled template of src, compiling it on first use.
func (c *Cache) Get(src string) (*Template, error) {
	c.mu.Lock()
	t, ok := c.mu.m[src]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := CompileWithLimits(src, c.limits)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.m) >= c.max {
		for k := range c.mu.m { // drop an arbitrary entry
			delete(c.mu.m, k)
			break
		}
	}
	c.mu.m[src] = t
	return t, nil
}

// renderer is the state of one render.
type renderer struct {
	out        *strings.Builder
	base       int // bytes held by enclosing captures
	limits     Limits
	now        func() time.Time
	iterations int
	callDepth  int
	folding    bool // evaluating a constant output as jinja2's compiler does
}

func (r *renderer) write(s string) error {
	if err := r.room(len(s)); err != nil {
		return err
	}
	r.out.WriteString(s)
	return nil
}

// writePieces writes the concatenation of strs, n bytes, as write does.
func (r *renderer) writePieces(strs []string, n int) error {
	if err := r.room(n); err != nil {
		return err
	}
	for _, x := range strs {
		r.out.WriteString(x)
	}
	return nil
}

// room fails when n more bytes would make the output too long.
func (r *renderer) room(n int) error {
	if r.base+r.out.Len()+n > r.limits.MaxOutput {
		return fmt.Errorf("%w: output longer than %d bytes", ErrLimit, r.limits.MaxOutput)
	}
	return nil
}

func (r *renderer) iterate() error {
	r.iterations++
	if r.iterations > r.limits.MaxIterations {
		return fmt.Errorf("%w: more than %d loop iterations", ErrLimit, r.limits.MaxIterations)
	}
	return nil
}

// checkLen fails a string or list of n bytes or items beyond the output
// limit.
func (r *renderer) checkLen(n int) error {
	if n > r.limits.MaxOutput || n < 0 {
		return fmt.Errorf("%w: value longer than %d", ErrLimit, r.limits.MaxOutput)
	}
	return nil
}

// scope is one level of variables.
type scope struct {
	vars   map[string]Value
	parent *scope
}

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) child() *scope { return &scope{vars: map[string]Value{}, parent: s} }
