package test

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// tcpProxy forwards one loopback port to a target, and can be cut off
// (every connection reset, new ones refused) and restored on the same port:
// a network fault between a subscriber and one pod's publisher.
type tcpProxy struct {
	target string
	addr   string
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		ln    net.Listener // nil while blocked
		conns map[net.Conn]bool
	}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{target: target}
	p.mu.conns = map[net.Conn]bool{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) port() int {
	_, s, _ := net.SplitHostPort(p.addr)
	n, _ := strconv.Atoi(s)
	return n
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.mu.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

// forward joins c to a new connection to the target until either side ends.
func (p *tcpProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	defer p.untrack(c, up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// track registers the connections, or closes them when the proxy is blocked.
func (p *tcpProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.ln == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.mu.conns[c] = true
	}
	return true
}

func (p *tcpProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.mu.conns, c)
	}
}

// block closes the listener and resets every connection.
func (p *tcpProxy) block(t *testing.T) {
	t.Helper()
	if !p.cut() {
		t.Fatal("proxy already blocked")
	}
}

func (p *tcpProxy) cut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.ln == nil {
		return false
	}
	_ = p.mu.ln.Close()
	p.mu.ln = nil
	for c := range p.mu.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a dropped route ends up
		}
		_ = c.Close()
	}
	return true
}

// restore listens on the same port again.
func (p *tcpProxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(errors.Join(errors.New("restore proxy"), err))
	}
	p.serve(ln)
}
