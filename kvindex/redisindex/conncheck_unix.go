//go:build unix

package redisindex

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open, without
// blocking: a read finds nothing to read (EAGAIN). A connection the server
// closed (a restart) reads EOF, one with unread bytes is out of step.
func alive(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, rerr := syscall.Read(int(fd), b[:])
		ok = errors.Is(rerr, syscall.EAGAIN)
		return true
	})
	return err == nil && ok
}
