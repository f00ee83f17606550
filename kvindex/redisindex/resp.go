package redisindex

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// rawPool is a small pool of plain RESP2 connections to a standalone
// server, for the two hot paths: a match's reads and an event batch's
// appends. A request is encoded into one buffer and written at once, and
// its replies are parsed in place, bulk values copied into the caller's
// arena: no allocation per value, where go-redis allocates a string and an
// interface per value and per argument. The cluster client keeps
// go-redis, which routes each command to the node owning its slot.
type rawPool struct {
	addr       string
	user, pass string
	tls        *tls.Config
	timeout    time.Duration

	mu     sync.Mutex
	idle   []*rawConn
	closed bool
}

// rawIdle bounds the idle connections kept.
const rawIdle = 32

// rawConn is one connection: its reader and its request buffer.
type rawConn struct {
	c net.Conn
	r *bufio.Reader
	w []byte
	// broken: a read or write failed and the connection is closed, or is
	// being closed (the group writer's, whose reader and sender are two
	// goroutines).
	broken atomic.Bool
}

// errProto is a reply that is not RESP2 as Redis writes it: the connection
// is dropped and the round trip failed.
var errProto = errors.New("redisindex: malformed reply")

// replyError is an error Redis replied to one command (a key of the wrong
// type): the connection stays usable.
type replyError string

func (e replyError) Error() string { return string(e) }

func newRawPool(cfg Config) *rawPool {
	return &rawPool{addr: cfg.Addrs[0], user: cfg.Username, pass: cfg.Password, tls: cfg.TLS, timeout: cfg.Timeout}
}

// get returns an idle connection or dials one.
func (p *rawPool) get() (*rawConn, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return p.dial()
		}
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if alive(c.c) {
			return c, nil
		}
		_ = c.c.Close() // the server closed it (a restart): not an outage
	}
}

// drop closes the idle connections: Redis failed or came back.
func (p *rawPool) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		_ = c.c.Close()
	}
	p.idle = p.idle[:0]
}

// put returns c to the pool, or closes it when it failed (its stream may
// be mid-reply) or the pool is full or closed.
func (p *rawPool) put(c *rawConn, failed bool) {
	if !failed {
		p.mu.Lock()
		if !p.closed && len(p.idle) < rawIdle {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	_ = c.c.Close()
}

// close closes the idle connections; connections in use close when put.
func (p *rawPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.drop()
}

func (p *rawPool) dial() (*rawConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if p.tls != nil {
		cfg := p.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(p.addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := &rawConn{c: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	if p.pass != "" {
		if p.user != "" {
			c.w = appendArray(c.w[:0], 3)
			c.w = appendBulk(c.w, "AUTH")
			c.w = appendBulk(c.w, p.user)
		} else {
			c.w = appendArray(c.w[:0], 2)
			c.w = appendBulk(c.w, "AUTH")
		}
		c.w = appendBulk(c.w, p.pass)
		err := c.flush(p.timeout)
		if err == nil {
			err = c.readStatus()
		}
		if err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("redisindex: AUTH: %w", err)
		}
	}
	return c, nil
}

// flush writes the request buffer, setting the round trip's deadline.
func (c *rawConn) flush(timeout time.Duration) error {
	if err := c.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := c.c.Write(c.w)
	return err
}

func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendBulk[S string | []byte](b []byte, s S) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendBulkInt(b []byte, v int64) []byte {
	var d [20]byte
	return appendBulk(b, strconv.AppendInt(d[:0], v, 10))
}

// line reads one reply line, without its CRLF, valid until the next read.
func (c *rawConn) line() ([]byte, error) {
	l, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errProto
		}
		return nil, err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, errProto
	}
	return l[:len(l)-2], nil
}

// parseInt reads a reply line's number, as Redis writes it.
func parseInt(b []byte) (int64, error) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, errProto
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, errProto
		}
		n = n*10 + int64(ch-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// reply reads one reply line of type kind ('+', ':' or '*') and returns
// what follows the type byte; a replyError is Redis's answer to the
// command, any other error a failed round trip.
func (c *rawConn) reply(kind byte) ([]byte, error) {
	l, err := c.line()
	switch {
	case err != nil:
		return nil, err
	case l[0] == '-':
		return nil, replyError(l[1:])
	case l[0] != kind:
		return nil, errProto
	}
	return l[1:], nil
}

// readStatus reads a simple string reply (+OK).
func (c *rawConn) readStatus() error {
	_, err := c.reply('+')
	return err
}

// readInt reads an integer reply.
func (c *rawConn) readInt() (int64, error) {
	l, err := c.reply(':')
	if err != nil {
		return 0, err
	}
	return parseInt(l)
}

// readArray reads an array reply's length (-1 a nil array).
func (c *rawConn) readArray() (int, error) {
	l, err := c.reply('*')
	if err != nil {
		return 0, err
	}
	n, err := parseInt(l)
	if err != nil || n < -1 || n > 1<<24 {
		return 0, errProto
	}
	return int(n), nil
}

// Spans of values read into an arena; a negative n is no value.
const (
	spanNil      = -1 // a nil reply: no such key (or a key of another type, to MGET)
	spanType     = -2 // Redis refused the command (a key of the wrong type)
	spanSize     = -3 // not whole records
	spanHolders  = -4 // over the holder bound
	spanNotBulk  = -5 // an element of another type
	spanTooLarge = 1 << 30
)

// span is a value's place in an arena.
type span struct{ off, n int32 }

// readBulk reads one element of an array reply: a bulk string appended to
// arena, or nil. A value longer than limit bytes, or not a multiple of mod,
// is skipped and reported by its span (spanHolders, spanSize).
func (c *rawConn) readBulk(arena []byte, limit, mod int) ([]byte, span, error) {
	l, err := c.line()
	if err != nil {
		return arena, span{}, err
	}
	switch l[0] {
	case '$':
	case ':', '+':
		return arena, span{n: spanNotBulk}, nil
	case '-':
		return arena, span{n: spanType}, nil
	default:
		return arena, span{}, errProto
	}
	n64, err := parseInt(l[1:])
	if err != nil || n64 < -1 || n64 >= spanTooLarge {
		return arena, span{}, errProto
	}
	if n64 == -1 {
		return arena, span{n: spanNil}, nil
	}
	n := int(n64)
	if n%mod != 0 || n > limit {
		if _, err := c.r.Discard(n + 2); err != nil {
			return arena, span{}, err
		}
		if n%mod != 0 {
			return arena, span{n: spanSize}, nil
		}
		return arena, span{n: spanHolders}, nil
	}
	off := len(arena)
	if cap(arena)-off < n+2 {
		arena = append(arena[:cap(arena)], make([]byte, n+2+off)...)
	}
	arena = arena[:off+n+2]
	if _, err := io.ReadFull(c.r, arena[off:]); err != nil {
		return arena[:off], span{}, err
	}
	if arena[off+n] != '\r' || arena[off+n+1] != '\n' {
		return arena[:off], span{}, errProto
	}
	return arena[:off+n], span{off: int32(off), n: int32(n)}, nil
}
